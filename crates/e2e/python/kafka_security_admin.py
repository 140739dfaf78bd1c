"""confluent-kafka's AdminClient (librdkafka) managing users and ACLs through a
secure cluster's Kafka listeners, as the end-to-end test drives it.

Every command connects over SASL_SSL with SCRAM-SHA-512 as USER with PASSWORD,
trusting the CA certificate CA:

  kafka_security_admin.py create-acls BOOTSTRAP CA USER PASSWORD TOPIC PRINCIPAL
      Creates ALLOW Write and ALLOW Describe on topic TOPIC for PRINCIPAL:
      "CREATED n".
  kafka_security_admin.py describe-acls BOOTSTRAP CA USER PASSWORD TOPIC
      The ACLs that apply to TOPIC: one line "ACL restype name pattern
      principal host operation permission" each, then "ACLS n".
  kafka_security_admin.py delete-acls BOOTSTRAP CA USER PASSWORD TOPIC PRINCIPAL
      Deletes PRINCIPAL's ACLs on TOPIC: "DELETED n" and an "ACL ..." line per
      ACL deleted.
  kafka_security_admin.py upsert-user BOOTSTRAP CA USER PASSWORD NAME NAME_PASSWORD
      Gives NAME SCRAM-SHA-256 (4096 iterations) and SCRAM-SHA-512 (8192)
      credentials of NAME_PASSWORD: "UPSERTED NAME".
  kafka_security_admin.py describe-user BOOTSTRAP CA USER PASSWORD NAME
      "CREDENTIAL NAME mechanism iterations" per credential NAME has, or
      "NO-USER NAME error" if describing NAME fails; then "USERS a,b,..."
      (every user, described without naming any).
  kafka_security_admin.py delete-user BOOTSTRAP CA USER PASSWORD NAME
      Deletes both of NAME's credentials: "DELETED-USER NAME".
  kafka_security_admin.py produce BOOTSTRAP CA USER PASSWORD TOPIC COUNT
      Lists TOPIC's metadata ("METADATA TOPIC partitions"), then produces COUNT
      records with acks=all: "ACK partition offset" each, "FAIL error" per
      failed one, then "DONE remaining".
  kafka_security_admin.py refused BOOTSTRAP CA USER PASSWORD
      Creates an ACL and changes USER's own password, which a user without
      Cluster Alter may not: "REFUSED api error-name" each; then "DESCRIBED
      DescribeAcls n", the ACLs listed to USER (librdkafka does not report
      DescribeAcls' error code).
  kafka_security_admin.py login-fails BOOTSTRAP CA USER PASSWORD
      Waits (30 s at most) for the login to fail: "LOGIN-FAILED error-name".

Exits non-zero (with a traceback) on anything unexpected.
"""

import sys
import time

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

# Every call's bound, in seconds.
TIMEOUT = 30


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def settings(bootstrap, ca, user, password):
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": ca,
        "socket.timeout.ms": TIMEOUT * 1000,
    }


def admin(bootstrap, ca, user, password):
    return AdminClient(settings(bootstrap, ca, user, password))


def show(binding):
    return " ".join(
        [
            "ACL",
            binding.restype.name,
            binding.name,
            binding.resource_pattern_type.name,
            binding.principal,
            binding.host,
            binding.operation.name,
            binding.permission_type.name,
        ]
    )


def on_topic(topic, principal=None):
    return AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.MATCH,
        principal,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )


def create_acls(client, topic, principal):
    acls = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            principal,
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)
    ]
    for future in client.create_acls(acls, request_timeout=TIMEOUT).values():
        future.result(timeout=TIMEOUT)
    say(f"CREATED {len(acls)}")


def describe_acls(client, topic):
    found = client.describe_acls(on_topic(topic), request_timeout=TIMEOUT).result(TIMEOUT)
    for binding in sorted(found):
        say(show(binding))
    say(f"ACLS {len(found)}")


def delete_acls(client, topic, principal):
    futures = client.delete_acls([on_topic(topic, principal)], request_timeout=TIMEOUT)
    deleted = [b for f in futures.values() for b in f.result(timeout=TIMEOUT)]
    say(f"DELETED {len(deleted)}")
    for binding in sorted(deleted):
        say(show(binding))


def upsert_user(client, name, password):
    alterations = [
        UserScramCredentialUpsertion(name, ScramCredentialInfo(mechanism, iterations), password.encode())
        for mechanism, iterations in ((ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192))
    ]
    for user, future in client.alter_user_scram_credentials(alterations, request_timeout=TIMEOUT).items():
        future.result(timeout=TIMEOUT)
        say(f"UPSERTED {user}")


def describe_user(client, name):
    described = client.describe_user_scram_credentials([name], request_timeout=TIMEOUT)
    try:
        description = described[name].result(timeout=TIMEOUT)
    except KafkaException as e:
        say(f"NO-USER {name} {e.args[0].name()}")
    else:
        for info in sorted(description.scram_credential_infos, key=lambda i: i.mechanism):
            say(f"CREDENTIAL {name} {info.mechanism.name} {info.iterations}")
    everyone = client.describe_user_scram_credentials(request_timeout=TIMEOUT).result(TIMEOUT)
    say("USERS " + ",".join(sorted(everyone)))


def delete_user(client, name):
    alterations = [
        UserScramCredentialDeletion(name, mechanism)
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    for user, future in client.alter_user_scram_credentials(alterations, request_timeout=TIMEOUT).items():
        future.result(timeout=TIMEOUT)
        say(f"DELETED-USER {user}")


def produce(conf, topic, count):
    client = AdminClient(conf)
    metadata = client.list_topics(topic, timeout=TIMEOUT)
    partitions = metadata.topics[topic].partitions
    if metadata.topics[topic].error is not None:
        raise SystemExit(f"metadata of {topic}: {metadata.topics[topic].error}")
    say(f"METADATA {topic} {len(partitions)}")
    producer = Producer(dict(conf, **{"acks": "all", "message.timeout.ms": TIMEOUT * 1000}))

    def delivered(err, msg):
        if err is not None:
            say(f"FAIL {err}")
        else:
            say(f"ACK {msg.partition()} {msg.offset()}")

    for i in range(count):
        producer.produce(topic, value=f"bob-{i}".encode(), on_delivery=delivered)
    say(f"DONE {producer.flush(TIMEOUT)}")


def refused(client, name):
    """Alters and describes what only the cluster's administrators may."""
    acl = AclBinding(
        ResourceType.TOPIC,
        "any",
        ResourcePatternType.LITERAL,
        f"User:{name}",
        "*",
        AclOperation.ALL,
        AclPermissionType.ALLOW,
    )
    own = UserScramCredentialUpsertion(
        name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"a new password"
    )
    attempts = [
        ("CreateAcls", lambda: client.create_acls([acl], request_timeout=TIMEOUT)[acl].result(TIMEOUT)),
        (
            "AlterUserScramCredentials",
            lambda: client.alter_user_scram_credentials([own], request_timeout=TIMEOUT)[name].result(TIMEOUT),
        ),
    ]
    # Not DescribeUserScramCredentials: librdkafka frees memory it does not
    # own when that response carries a request-level error (any refusal, from
    # Kafka's brokers too), and the process crashes.
    for api, attempt in attempts:
        try:
            attempt()
        except KafkaException as e:
            say(f"REFUSED {api} {e.args[0].name()}")
            continue
        raise SystemExit(f"{api} was served to {name}, who may not")
    # librdkafka does not surface DescribeAcls' error_code (a refusal reads as
    # no ACLs at all), so what shows is that none is listed.
    found = client.describe_acls(on_topic("any"), request_timeout=TIMEOUT).result(TIMEOUT)
    say(f"DESCRIBED DescribeAcls {len(found)}")


def login_fails(conf):
    failures = []
    producer = Producer(dict(conf, error_cb=lambda err: failures.append(err)))
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        producer.poll(0.2)
        if any(err.code() == KafkaError._AUTHENTICATION for err in failures):
            say("LOGIN-FAILED _AUTHENTICATION")
            return
    raise SystemExit(f"the login did not fail within {TIMEOUT} s: {failures}")


def main():
    command, args = sys.argv[1], sys.argv[2:]
    bootstrap, ca, user, password, rest = args[0], args[1], args[2], args[3], args[4:]
    conf = settings(bootstrap, ca, user, password)
    if command == "create-acls":
        create_acls(admin(bootstrap, ca, user, password), rest[0], rest[1])
    elif command == "describe-acls":
        describe_acls(admin(bootstrap, ca, user, password), rest[0])
    elif command == "delete-acls":
        delete_acls(admin(bootstrap, ca, user, password), rest[0], rest[1])
    elif command == "upsert-user":
        upsert_user(admin(bootstrap, ca, user, password), rest[0], rest[1])
    elif command == "describe-user":
        describe_user(admin(bootstrap, ca, user, password), rest[0])
    elif command == "delete-user":
        delete_user(admin(bootstrap, ca, user, password), rest[0])
    elif command == "produce":
        produce(conf, rest[0], int(rest[1]))
    elif command == "refused":
        refused(admin(bootstrap, ca, user, password), user)
    elif command == "login-fails":
        login_fails(conf)
    else:
        sys.exit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
