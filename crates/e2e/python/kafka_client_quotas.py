"""kafka-python's KafkaAdminClient sending Kafka's client quota APIs
(AlterClientQuotas, DescribeClientQuotas) to a plaintext cluster's Kafka
listeners, as the end-to-end test drives it. kafka-python 3.0 encodes both
APIs but has no admin methods for them: the requests go through the admin
client's connection manager, as its own admin methods send theirs.

  kafka_client_quotas.py alter BOOTSTRAP CLIENT_ID KEY VALUE
      Sets KEY of client id CLIENT_ID (the default client id when CLIENT_ID
      is "<default>") to VALUE, or removes it when VALUE is "remove":
      "ALTERED error-code" (0 for none) and the error message, if any.
  kafka_client_quotas.py describe BOOTSTRAP CLIENT_ID
      The quotas of client id CLIENT_ID alone (strict, exact match): one
      "QUOTA client-id key value" line each, then "ENTRIES n".

Exits non-zero (with a traceback) on anything unexpected.
"""

import sys

from kafka.admin import KafkaAdminClient
from kafka.protocol.admin.client_quotas import (
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
)


def admin(bootstrap):
    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="quota-admin",
                            request_timeout_ms=30000)


def send(client, request):
    return client._manager.run(client._manager.send, request)


def alter(bootstrap, client_id, key, value):
    name = None if client_id == "<default>" else client_id
    Entry = AlterClientQuotasRequest.EntryData
    op = (Entry.OpData(key=key, value=0.0, remove=True) if value == "remove"
          else Entry.OpData(key=key, value=float(value), remove=False))
    request = AlterClientQuotasRequest(
        entries=[Entry(entity=[Entry.EntityData(entity_type="client-id", entity_name=name)],
                       ops=[op])],
        validate_only=False)
    client = admin(bootstrap)
    response = send(client, request)
    client.close()
    entry = response.entries[0]
    print("ALTERED", entry.error_code, entry.error_message or "")


def describe(bootstrap, client_id):
    Component = DescribeClientQuotasRequest.ComponentData
    request = DescribeClientQuotasRequest(
        components=[Component(entity_type="client-id", match_type=0, match=client_id)],
        strict=True)
    client = admin(bootstrap)
    response = send(client, request)
    client.close()
    if response.error_code != 0:
        raise RuntimeError(f"DescribeClientQuotas: {response.error_code} {response.error_message}")
    for entry in response.entries or []:
        names = {e.entity_type: e.entity_name for e in entry.entity}
        for v in entry.values:
            print("QUOTA", names.get("client-id"), v.key, v.value)
    print("ENTRIES", len(response.entries or []))


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "alter":
        alter(*args)
    elif command == "describe":
        describe(*args)
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv)
