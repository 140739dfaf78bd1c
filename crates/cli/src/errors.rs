//! Turns client errors into messages that name the problem and the fix.

use syncline_client::{ClientError, ErrorCode, ProduceError};

/// What a command was doing, for the wording of its errors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub(crate) bootstrap: &'a str,
    pub(crate) topic: Option<&'a str>,
}

const CLUSTER_UP: &str = "is the cluster up? try `scripts/cluster.sh up`, or point \
    --bootstrap-server (or SYNCLINE_BOOTSTRAP_SERVER) at a running broker";

const SECURITY_FLAGS: &str =
    " (the CLI takes these as --security-protocol, --sasl-* and --ssl-* flags, or in a --command-config file)";

/// A failure that the security settings, not the network, are behind.
fn is_security(e: &ClientError) -> bool {
    match e {
        ClientError::ClosedBeforeAnswer(_) => true,
        ClientError::Unreachable { last, .. } => is_security(last),
        ClientError::Config(message) => ["security.protocol", "sasl.", "ssl."]
            .iter()
            .any(|name| message.contains(name)),
        other => other.is_security(),
    }
}

/// "connection refused" rather than "Connection refused (os error 111)".
fn io_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused => "connection refused".into(),
        ConnectionReset => "connection reset".into(),
        TimedOut => "timed out".into(),
        NotFound => "host not found".into(),
        AddrNotAvailable => "address not available".into(),
        _ => e.to_string(),
    }
}

/// The client error without its hint.
fn reason(e: &ClientError) -> String {
    match e {
        ClientError::Connect(addr, io) => format!("cannot reach {addr} ({})", io_reason(io)),
        ClientError::ConnectTimeout(addr) => format!("cannot reach {addr} (timed out connecting)"),
        ClientError::Unreachable { servers, last } => {
            format!("cannot reach any of {servers} (last: {})", reason(last))
        }
        ClientError::Disconnected(addr) => format!("lost the connection to {addr}"),
        other => other.to_string(),
    }
}

/// What to do about an error code, when there is something to say.
pub(crate) fn code_hint(code: ErrorCode, topic: Option<&str>) -> Option<String> {
    let t = topic.unwrap_or("TOPIC");
    let hint = match code {
        ErrorCode::UnknownTopicOrPartition => format!(
            "create it with `syncline topic create {t} --partitions N --replication-factor R`, \
             or see `syncline topic list`"
        ),
        ErrorCode::TopicAlreadyExists => format!("see it with `syncline topic describe {t}`"),
        ErrorCode::InvalidReplicationFactor => {
            "the replication factor must be between 1 and the number of live brokers \
             (see `syncline cluster describe`)"
                .into()
        }
        ErrorCode::InvalidPartitions => "--partitions must be at least 1".into(),
        ErrorCode::InvalidConfig => {
            "check the --config names and values (Kafka's dotted names, e.g. \
             min.insync.replicas=2, at most the replication factor)"
                .into()
        }
        ErrorCode::InvalidTopicException => {
            "topic names use letters, digits, '.', '_' and '-', at most 249 characters".into()
        }
        ErrorCode::NotEnoughReplicas => format!(
            "fewer replicas are in sync than the topic's min.insync.replicas, so nothing was \
             written: bring the brokers back (`syncline topic describe {t}` shows the ISR), \
             or produce with --acks 1 to accept a weaker guarantee"
        ),
        ErrorCode::NotEnoughReplicasAfterAppend => format!(
            "the ISR shrank below min.insync.replicas after the leader wrote the records: they \
             are in the log but not guaranteed (`syncline topic describe {t}` shows the ISR)"
        ),
        ErrorCode::RequestTimedOut => format!(
            "the followers did not confirm in time: check `syncline topic describe {t}` for \
             lagging replicas, or raise --delivery-timeout-ms"
        ),
        ErrorCode::LeaderNotAvailable
        | ErrorCode::NotLeaderOrFollower
        | ErrorCode::FencedLeaderEpoch
        | ErrorCode::UnknownLeaderEpoch => format!(
            "leadership is moving or the partition is offline: `syncline topic describe {t}` \
             shows the leaders; retry, or raise --retries to ride out an election"
        ),
        ErrorCode::MessageTooLarge | ErrorCode::RecordListTooLarge => {
            "the record is larger than the broker accepts: send smaller records".into()
        }
        ErrorCode::NotController => "the controller is changing: retry in a moment".into(),
        ErrorCode::TopicAuthorizationFailed
        | ErrorCode::GroupAuthorizationFailed
        | ErrorCode::ClusterAuthorizationFailed => {
            "the user this command authenticates as (--command-config, --sasl-username) lacks an \
             ACL for it: an administrator grants it with `syncline acl add` (see `syncline acl \
             list`), or authenticate as a user that has one"
                .into()
        }
        _ => return None,
    };
    Some(hint)
}

/// The full message for a client error: problem, then fix.
pub(crate) fn explain(e: &ClientError, ctx: Ctx<'_>) -> String {
    let problem = reason(e);
    if is_security(e) {
        return format!("{problem}{SECURITY_FLAGS}");
    }
    if e.is_connectivity() {
        return format!("{problem}: {CLUSTER_UP}");
    }
    match e {
        ClientError::UnknownTopic(t) => {
            format!(
                "{problem}: {}",
                code_hint(ErrorCode::UnknownTopicOrPartition, Some(t)).unwrap_or_default()
            )
        }
        ClientError::Timeout(ms) => format!(
            "no answer from the cluster within {ms} ms: is a broker overloaded or cut off? \
             `syncline cluster describe` shows which are alive"
        ),
        ClientError::Config(message) if message.contains("bootstrap") => format!(
            "{problem} (--bootstrap-server is {:?}; expected HOST:PORT[,HOST:PORT...])",
            ctx.bootstrap
        ),
        ClientError::UnknownPartition { topic, .. } => {
            format!("{problem}: see `syncline topic describe {topic}`")
        }
        _ => match e.code().and_then(|c| code_hint(c, ctx.topic)) {
            Some(hint) => format!("{problem}: {hint}"),
            None => problem,
        },
    }
}

/// The message for a produce failure.
pub(crate) fn explain_produce(e: &ProduceError, ctx: Ctx<'_>) -> String {
    match e {
        ProduceError::Client(c) => explain(c, ctx),
        ProduceError::DeliveryTimeout {
            last_error: Some(last),
            ..
        } => match last.as_ref() {
            ProduceError::Client(c) if c.is_connectivity() => format!("{e}: {CLUSTER_UP}"),
            _ => match e.code().and_then(|c| code_hint(c, ctx.topic)) {
                Some(hint) => format!("{e}: {hint}"),
                None => e.to_string(),
            },
        },
        _ => match e.code().and_then(|c| code_hint(c, ctx.topic)) {
            Some(hint) => format!("{e}: {hint}"),
            None => e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: Ctx<'static> = Ctx {
        bootstrap: "127.0.0.1:9092",
        topic: Some("events"),
    };

    #[test]
    fn connection_refused_names_address_reason_and_fix() {
        let e = ClientError::Connect(
            "127.0.0.1:9092".into(),
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        );
        let msg = explain(&e, CTX);
        assert!(
            msg.starts_with("cannot reach 127.0.0.1:9092 (connection refused): is the cluster up?"),
            "{msg}"
        );
        assert!(msg.contains("scripts/cluster.sh up"));
        let many = ClientError::Unreachable {
            servers: "a:1, b:2".into(),
            last: Box::new(ClientError::ConnectTimeout("b:2".into())),
        };
        assert!(explain(&many, CTX)
            .starts_with("cannot reach any of a:1, b:2 (last: cannot reach b:2 (timed out"));
    }

    #[test]
    fn security_failures_point_at_the_security_flags_not_the_network() {
        let closed = ClientError::ClosedBeforeAnswer("127.0.0.1:9093".into());
        let msg = explain(&closed, CTX);
        assert!(
            msg.contains("check security.protocol") && msg.contains("--security-protocol"),
            "{msg}"
        );
        assert!(!msg.contains("is the cluster up"), "{msg}");
        let auth = ClientError::AuthenticationFailed {
            username: "alice".into(),
            mechanism: "SCRAM-SHA-256",
            message: String::new(),
        };
        let msg = explain(&auth, CTX);
        assert!(
            msg.starts_with("authentication failed for user alice: wrong username or password")
                && msg.contains("--sasl-*"),
            "{msg}"
        );
        let config = ClientError::Config(
            "security.protocol=SASL_SSL needs sasl.username and sasl.password".into(),
        );
        let msg = explain(&config, CTX);
        assert!(!msg.contains("--bootstrap-server is"), "{msg}");
        assert!(msg.contains("--command-config"), "{msg}");
    }

    #[test]
    fn topic_errors_say_what_to_run() {
        let msg = explain(&ClientError::UnknownTopic("events".into()), CTX);
        assert!(msg.contains("syncline topic create events"), "{msg}");
        let exists = ClientError::Topic {
            topic: "events".into(),
            code: ErrorCode::TopicAlreadyExists,
            message: String::new(),
        };
        assert_eq!(
            explain(&exists, CTX),
            "topic events: TOPIC_ALREADY_EXISTS: see it with `syncline topic describe events`"
        );
    }

    #[test]
    fn produce_errors_name_the_code() {
        let e = ProduceError::Broker {
            code: ErrorCode::NotEnoughReplicas,
            message: String::new(),
        };
        let msg = explain_produce(&e, CTX);
        assert!(
            msg.starts_with("NOT_ENOUGH_REPLICAS: fewer replicas"),
            "{msg}"
        );
        let timeout = ProduceError::DeliveryTimeout {
            timeout_ms: 1000,
            last_error: Some(Box::new(e)),
        };
        let msg = explain_produce(&timeout, CTX);
        assert!(msg.contains("last error: NOT_ENOUGH_REPLICAS"), "{msg}");
        assert!(msg.contains("min.insync.replicas"), "{msg}");
    }
}
