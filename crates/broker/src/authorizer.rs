//! Who may do what on the client APIs: each request's resources and the
//! operation it needs on each, checked against the ACLs of the metadata image
//! (`syncline_auth::acl::authorize`, Kafka's rules) when `authorizer_enable`
//! is on.
//!
//! A request is served whole, served in part (the refused topics answered
//! `TOPIC_AUTHORIZATION_FAILED` beside the rest, as Kafka does for Produce,
//! Fetch and Metadata), or refused whole with `TOPIC_`, `GROUP_` or
//! `CLUSTER_AUTHORIZATION_FAILED`. Brokers and the broker's own requests are
//! never checked here (the internal APIs have their own rule, in `auth`).
//! A denial is counted every time and logged once per principal and
//! operation.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;
use syncline_auth::acl::{self, Acls, AuthorizerConfig, Operation, Resource, ResourceType};
use syncline_proto::{pb, ErrorCode};

use crate::auth::Principal;
use crate::config::AuthorizerSettings;

/// Adds what was refused to the response of what was served.
pub(crate) type Patch = Box<dyn FnOnce(&mut pb::response::Body) + Send>;

/// What to do with a request.
pub(crate) enum Verdict {
    /// Serve it as it is.
    Serve(pb::request::Body),
    /// Serve what is left of it; the patch answers the rest.
    Partial(pb::request::Body, Patch),
    /// Answer this without serving anything.
    Answer(pb::response::Body),
    /// Refuse the whole request.
    Refuse(ErrorCode, String),
    /// Nothing to serve and nothing to answer (acks=0 produce).
    Drop,
}

/// The broker's authorizer: settings, and which denials were logged.
#[derive(Debug)]
pub(crate) struct Authorizer {
    enabled: bool,
    config: AuthorizerConfig,
    logged: Mutex<HashSet<(String, Operation)>>,
    /// `syncline_authorization_failures_total`.
    failures: prometheus_client::metrics::counter::Counter,
}

/// One request's checks: the principal, its host and the ACLs.
struct Check<'a> {
    authorizer: &'a Authorizer,
    acls: Arc<Acls>,
    principal: String,
    host: &'a str,
}

impl Check<'_> {
    fn allowed(&self, op: Operation, resource_type: ResourceType, name: &str) -> bool {
        let ok = acl::authorize(
            &self.acls,
            &self.authorizer.config,
            &self.principal,
            self.host,
            op,
            Resource {
                resource_type,
                name,
            },
        );
        if !ok {
            self.authorizer
                .denied(&self.principal, op, resource_type, name);
        }
        ok
    }

    fn topic(&self, op: Operation, name: &str) -> bool {
        self.allowed(op, ResourceType::Topic, name)
    }

    fn group(&self, op: Operation, name: &str) -> bool {
        self.allowed(op, ResourceType::Group, name)
    }

    fn cluster(&self, op: Operation) -> bool {
        self.allowed(op, ResourceType::Cluster, acl::CLUSTER_RESOURCE_NAME)
    }

    /// Create on the cluster or on the topic.
    fn create_topic(&self, name: &str) -> bool {
        self.allowed_quietly(
            Operation::Create,
            ResourceType::Cluster,
            acl::CLUSTER_RESOURCE_NAME,
        ) || self.topic(Operation::Create, name)
    }

    fn allowed_quietly(&self, op: Operation, resource_type: ResourceType, name: &str) -> bool {
        acl::authorize(
            &self.acls,
            &self.authorizer.config,
            &self.principal,
            self.host,
            op,
            Resource {
                resource_type,
                name,
            },
        )
    }

    /// The refusal of the whole request for `op` on `resource`.
    fn refusal(&self, op: Operation, resource_type: ResourceType, name: &str) -> Verdict {
        let code = match resource_type {
            ResourceType::Topic => ErrorCode::TopicAuthorizationFailed,
            ResourceType::Group => ErrorCode::GroupAuthorizationFailed,
            ResourceType::Cluster => ErrorCode::ClusterAuthorizationFailed,
        };
        Verdict::Refuse(
            code,
            denial_message(&self.principal, op, resource_type, name),
        )
    }

    /// Refuses the request unless `op` is allowed on every topic of `names`.
    fn every_topic<'n>(
        &self,
        op: Operation,
        names: impl IntoIterator<Item = &'n str>,
        body: pb::request::Body,
    ) -> Verdict {
        for name in names {
            if !self.topic(op, name) {
                return self.refusal(op, ResourceType::Topic, name);
            }
        }
        Verdict::Serve(body)
    }
}

/// "User:bob is not allowed to Write topic orders ...": what a denial says.
fn denial_message(
    principal: &str,
    op: Operation,
    resource_type: ResourceType,
    name: &str,
) -> String {
    let (what, flag) = match resource_type {
        ResourceType::Topic => (format!("topic {name}"), format!("--topic {name}")),
        ResourceType::Group => (format!("group {name}"), format!("--group {name}")),
        ResourceType::Cluster => ("the cluster".to_string(), "--cluster".to_string()),
    };
    format!(
        "{principal} is not authorized to {} {what}: an ACL must allow it (syncline acl add --allow-principal {principal} --operation {} {flag})",
        op.name(),
        op.name()
    )
}

impl Authorizer {
    pub(crate) fn new(
        settings: AuthorizerSettings,
        failures: prometheus_client::metrics::counter::Counter,
    ) -> Authorizer {
        Authorizer {
            failures,
            enabled: settings.enabled,
            config: AuthorizerConfig {
                super_users: settings.super_users,
                allow_everyone_if_no_acl_found: settings.allow_everyone_if_no_acl_found,
            },
            logged: Mutex::new(HashSet::new()),
        }
    }

    /// Logs the first denial of each (principal, operation).
    fn denied(&self, principal: &str, op: Operation, resource_type: ResourceType, name: &str) {
        self.failures.inc();
        if self.logged.lock().insert((principal.to_string(), op)) {
            tracing::warn!(
                %principal,
                operation = op.name(),
                resource = %format!("{}:{name}", resource_type.name()),
                "authorization denied (logged once per principal and operation)"
            );
        }
    }

    /// What to do with `body` from `principal` at `host`. `acls`: the
    /// metadata image's (read only when the authorizer is on).
    pub(crate) fn check(
        &self,
        body: pb::request::Body,
        principal: &Principal,
        host: &str,
        acls: impl FnOnce() -> Arc<Acls>,
    ) -> Verdict {
        if !self.enabled || matches!(principal, Principal::Broker(_)) {
            return Verdict::Serve(body);
        }
        let check = Check {
            authorizer: self,
            acls: acls(),
            principal: principal.acl_name(),
            host,
        };
        decide(&check, body)
    }

    /// Whether the authorizer is on and `principal` is one it checks.
    pub(crate) fn checks(&self, principal: &Principal) -> bool {
        self.enabled && !matches!(principal, Principal::Broker(_))
    }

    /// The topic filter of a consumer's fetch (true: may Read), for the
    /// partitions of its fetch session too.
    pub(crate) fn fetch_filter(
        self: &Arc<Self>,
        principal: &Principal,
        host: &str,
        acls: Arc<Acls>,
    ) -> TopicFilter {
        let authorizer = self.clone();
        let principal = principal.acl_name();
        let host = host.to_string();
        Arc::new(move |topic: &str| {
            Check {
                authorizer: &authorizer,
                acls: acls.clone(),
                principal: principal.clone(),
                host: &host,
            }
            .topic(Operation::Read, topic)
        })
    }
}

/// Which topics a fetch may read.
pub(crate) type TopicFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

fn decide(check: &Check<'_>, body: pb::request::Body) -> Verdict {
    use pb::request::Body;
    use Operation::*;
    match body {
        Body::Produce(mut r) => {
            let (allowed, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.topics)
                .into_iter()
                .partition(|t| check.topic(Write, &t.name));
            if denied.is_empty() {
                r.topics = allowed;
                return Verdict::Serve(Body::Produce(r));
            }
            let refused: Vec<pb::ProduceTopicResponse> = denied
                .iter()
                .map(|t| pb::ProduceTopicResponse {
                    name: t.name.clone(),
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| pb::ProducePartitionResponse {
                            partition: p.partition,
                            error_code: ErrorCode::TopicAuthorizationFailed as i32,
                            error_message: denial_message(
                                &check.principal,
                                Write,
                                ResourceType::Topic,
                                &t.name,
                            ),
                            ..Default::default()
                        })
                        .collect(),
                })
                .collect();
            if r.acks == 0 && allowed.is_empty() {
                return Verdict::Drop;
            }
            if allowed.is_empty() {
                return Verdict::Answer(pb::response::Body::Produce(pb::ProduceResponse {
                    topics: refused,
                    throttle_time_ms: 0,
                }));
            }
            r.topics = allowed;
            Verdict::Partial(
                Body::Produce(r),
                Box::new(move |resp| {
                    if let pb::response::Body::Produce(p) = resp {
                        p.topics.extend(refused);
                    }
                }),
            )
        }
        Body::Metadata(mut r) => {
            if r.topics.is_empty() {
                // Every topic: those it may not Describe are left out.
                let filter = resource_filter(check, ResourceType::Topic, Describe);
                return Verdict::Partial(
                    Body::Metadata(r),
                    Box::new(move |resp| {
                        if let pb::response::Body::Metadata(m) = resp {
                            m.topics.retain(|t| filter(&t.name));
                        }
                    }),
                );
            }
            let (allowed, denied): (Vec<String>, Vec<String>) = std::mem::take(&mut r.topics)
                .into_iter()
                .partition(|t| check.topic(Describe, t));
            if r.allow_auto_topic_creation && !allowed.iter().all(|t| check.create_topic(t)) {
                r.allow_auto_topic_creation = false;
            }
            // With none left it asks for no topic (not for every one).
            r.topics = allowed.clone();
            r.no_topics = r.topics.is_empty();
            // A set: the answer is checked against it once per topic.
            let allowed: std::collections::HashSet<String> = allowed.into_iter().collect();
            Verdict::Partial(
                Body::Metadata(r),
                Box::new(move |resp| {
                    if let pb::response::Body::Metadata(m) = resp {
                        m.topics.retain(|t| allowed.contains(&t.name));
                        m.topics
                            .extend(denied.into_iter().map(|name| pb::TopicMetadata {
                                name,
                                error_code: ErrorCode::TopicAuthorizationFailed as i32,
                                partitions: Vec::new(),
                                topic_id: 0,
                            }));
                    }
                }),
            )
        }
        Body::DescribeTopics(r) => {
            let filter = resource_filter(check, ResourceType::Topic, Describe);
            // A topic's configs are for those who may DescribeConfigs it.
            let configs = resource_filter(check, ResourceType::Topic, DescribeConfigs);
            let named: Vec<String> = r.topics.clone();
            Verdict::Partial(
                Body::DescribeTopics(r),
                Box::new(move |resp| {
                    if let pb::response::Body::DescribeTopics(d) = resp {
                        for t in &mut d.topics {
                            if !configs(&t.name) {
                                t.configs.clear();
                            }
                            if !filter(&t.name) {
                                *t = pb::TopicDescription {
                                    name: std::mem::take(&mut t.name),
                                    error_code: ErrorCode::TopicAuthorizationFailed as i32,
                                    ..Default::default()
                                };
                            }
                        }
                        if named.is_empty() {
                            d.topics.retain(|t| {
                                t.error_code != ErrorCode::TopicAuthorizationFailed as i32
                            });
                        }
                    }
                }),
            )
        }
        Body::ListOffsets(r) => {
            let names: Vec<String> = r.topics.iter().map(|t| t.name.clone()).collect();
            check.every_topic(
                Describe,
                names.iter().map(String::as_str),
                Body::ListOffsets(r),
            )
        }
        Body::OffsetsForLeaderEpoch(r) => {
            let names: Vec<String> = r.topics.iter().map(|t| t.topic.clone()).collect();
            check.every_topic(
                Describe,
                names.iter().map(String::as_str),
                Body::OffsetsForLeaderEpoch(r),
            )
        }
        Body::CreateTopics(r) => {
            for t in &r.topics {
                if !check.create_topic(&t.name) {
                    return check.refusal(Create, ResourceType::Topic, &t.name);
                }
            }
            Verdict::Serve(Body::CreateTopics(r))
        }
        Body::DeleteTopics(r) => {
            let names = r.topics.clone();
            check.every_topic(
                Delete,
                names.iter().map(String::as_str),
                Body::DeleteTopics(r),
            )
        }
        Body::AlterTopic(r) => {
            let op = if r.partitions > 0 {
                Alter
            } else {
                AlterConfigs
            };
            if r.partitions > 0
                && !(r.set_configs.is_empty() && r.delete_configs.is_empty())
                && !check.topic(AlterConfigs, &r.name)
            {
                return check.refusal(AlterConfigs, ResourceType::Topic, &r.name);
            }
            let name = r.name.clone();
            check.every_topic(op, [name.as_str()], Body::AlterTopic(r))
        }
        Body::DescribeConfigs(r) => {
            for c in &r.resources {
                let ok = match c.resource_type {
                    2 => check.topic(DescribeConfigs, &c.resource_name),
                    _ => check.cluster(DescribeConfigs),
                };
                if !ok {
                    let t = if c.resource_type == 2 {
                        ResourceType::Topic
                    } else {
                        ResourceType::Cluster
                    };
                    return check.refusal(DescribeConfigs, t, &c.resource_name);
                }
            }
            Verdict::Serve(Body::DescribeConfigs(r))
        }
        body @ (Body::ElectLeaders(_)
        | Body::AlterReassignments(_)
        | Body::AlterUserScramCredentials(_)
        | Body::CreateAcls(_)
        | Body::DeleteAcls(_)) => cluster(check, Alter, body),
        body @ (Body::DescribeQuorum(_)
        | Body::DescribeUserScramCredentials(_)
        | Body::DescribeAcls(_)) => cluster(check, Describe, body),
        // As Kafka authorizes the quota APIs: configs of the cluster.
        body @ Body::DescribeClientQuotas(_) => cluster(check, DescribeConfigs, body),
        body @ Body::AlterClientQuotas(_) => cluster(check, AlterConfigs, body),
        Body::InitProducerId(r) => {
            if acl::may_write_some_topic(
                &check.acls,
                &check.authorizer.config,
                &check.principal,
                check.host,
            ) {
                Verdict::Serve(Body::InitProducerId(r))
            } else {
                check.authorizer.denied(
                    &check.principal,
                    IdempotentWrite,
                    ResourceType::Cluster,
                    acl::CLUSTER_RESOURCE_NAME,
                );
                Verdict::Refuse(
                    ErrorCode::ClusterAuthorizationFailed,
                    format!(
                        "{p} may not produce idempotently: it needs Write on some topic or IdempotentWrite on the cluster (syncline acl add --allow-principal {p} --operation Write --topic TOPIC)",
                        p = check.principal
                    ),
                )
            }
        }
        Body::FindCoordinator(r) => {
            if r.key_type == 0 && !check.group(Describe, &r.key) {
                return check.refusal(Describe, ResourceType::Group, &r.key);
            }
            Verdict::Serve(Body::FindCoordinator(r))
        }
        Body::JoinGroup(r) => group(check, Read, r.group_id.clone(), Body::JoinGroup(r)),
        Body::SyncGroup(r) => group(check, Read, r.group_id.clone(), Body::SyncGroup(r)),
        Body::Heartbeat(r) => group(check, Read, r.group_id.clone(), Body::Heartbeat(r)),
        Body::LeaveGroup(r) => group(check, Read, r.group_id.clone(), Body::LeaveGroup(r)),
        Body::OffsetCommit(r) => {
            if !check.group(Read, &r.group_id) {
                return check.refusal(Read, ResourceType::Group, &r.group_id);
            }
            let names: Vec<String> = r.topics.iter().map(|t| t.name.clone()).collect();
            check.every_topic(
                Read,
                names.iter().map(String::as_str),
                Body::OffsetCommit(r),
            )
        }
        Body::OffsetFetch(r) => {
            if !check.group(Describe, &r.group_id) {
                return check.refusal(Describe, ResourceType::Group, &r.group_id);
            }
            if r.all && r.topics.is_empty() {
                // Every offset the group committed: those of topics it may
                // not Describe are left out, as Kafka does.
                let filter = resource_filter(check, ResourceType::Topic, Describe);
                return Verdict::Partial(
                    Body::OffsetFetch(r),
                    Box::new(move |resp| {
                        if let pb::response::Body::OffsetFetch(f) = resp {
                            f.topics.retain(|t| filter(&t.name));
                        }
                    }),
                );
            }
            let names: Vec<String> = r.topics.iter().map(|t| t.name.clone()).collect();
            check.every_topic(
                Describe,
                names.iter().map(String::as_str),
                Body::OffsetFetch(r),
            )
        }
        Body::DescribeGroups(r) => {
            for g in &r.group_ids {
                if !check.group(Describe, g) {
                    return check.refusal(Describe, ResourceType::Group, g);
                }
            }
            Verdict::Serve(Body::DescribeGroups(r))
        }
        Body::ListGroups(r) => {
            if check.allowed_quietly(Describe, ResourceType::Cluster, acl::CLUSTER_RESOURCE_NAME) {
                return Verdict::Serve(Body::ListGroups(r));
            }
            let filter = resource_filter(check, ResourceType::Group, Describe);
            Verdict::Partial(
                Body::ListGroups(r),
                Box::new(move |resp| {
                    if let pb::response::Body::ListGroups(l) = resp {
                        l.groups.retain(|g| filter(&g.group_id));
                    }
                }),
            )
        }
        // Consumer fetches are filtered by the replica manager (their
        // sessions hold topics the request does not name); the internal APIs
        // have their own rule; the rest is open.
        other => Verdict::Serve(other),
    }
}

fn cluster(check: &Check<'_>, op: Operation, body: pb::request::Body) -> Verdict {
    if check.cluster(op) {
        Verdict::Serve(body)
    } else {
        check.refusal(op, ResourceType::Cluster, acl::CLUSTER_RESOURCE_NAME)
    }
}

fn group(check: &Check<'_>, op: Operation, group: String, body: pb::request::Body) -> Verdict {
    if check.group(op, &group) {
        Verdict::Serve(body)
    } else {
        check.refusal(op, ResourceType::Group, &group)
    }
}

/// A filter of resources of `resource_type` by `op`, for patches run after
/// the request was served (it owns copies of what it needs; denials are not
/// logged by it).
fn resource_filter(
    check: &Check<'_>,
    resource_type: ResourceType,
    op: Operation,
) -> impl Fn(&str) -> bool + Send + 'static {
    let acls = check.acls.clone();
    let config = check.authorizer.config.clone();
    let principal = check.principal.clone();
    let host = check.host.to_string();
    move |name: &str| {
        acl::authorize(
            &acls,
            &config,
            &principal,
            &host,
            op,
            Resource {
                resource_type,
                name,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncline_auth::acl::{AclBinding, PatternType, Permission};

    fn allow(principal: &str, op: Operation, rt: ResourceType, name: &str) -> AclBinding {
        AclBinding {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: PatternType::Literal,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission: Permission::Allow,
        }
    }

    fn authorizer() -> Authorizer {
        Authorizer::new(
            AuthorizerSettings {
                enabled: true,
                super_users: vec!["User:admin".into()],
                allow_everyone_if_no_acl_found: false,
            },
            Default::default(),
        )
    }

    fn acls() -> Arc<Acls> {
        Arc::new(Acls::new([
            allow(
                "User:alice",
                Operation::Write,
                ResourceType::Topic,
                "orders",
            ),
            allow("User:alice", Operation::Read, ResourceType::Topic, "orders"),
            allow("User:alice", Operation::Read, ResourceType::Group, "g"),
            allow("User:bob", Operation::Read, ResourceType::Topic, "orders"),
            allow(
                "User:carol",
                Operation::DescribeConfigs,
                ResourceType::Cluster,
                acl::CLUSTER_RESOURCE_NAME,
            ),
            allow(
                "User:dave",
                Operation::AlterConfigs,
                ResourceType::Cluster,
                acl::CLUSTER_RESOURCE_NAME,
            ),
        ]))
    }

    fn produce(topics: &[&str], acks: i32) -> pb::request::Body {
        pb::request::Body::Produce(pb::ProduceRequest {
            acks,
            timeout_ms: 1000,
            topics: topics
                .iter()
                .map(|t| pb::ProduceTopic {
                    name: (*t).into(),
                    partitions: vec![pb::ProducePartition {
                        partition: 0,
                        ..Default::default()
                    }],
                })
                .collect(),
        })
    }

    fn user(name: &str) -> Principal {
        Principal::User(name.into())
    }

    fn kind(v: &Verdict) -> String {
        match v {
            Verdict::Serve(_) => "serve".into(),
            Verdict::Partial(..) => "partial".into(),
            Verdict::Answer(_) => "answer".into(),
            Verdict::Refuse(code, _) => format!("refuse {code:?}"),
            Verdict::Drop => "drop".into(),
        }
    }

    #[test]
    fn requests_are_served_in_whole_in_part_or_refused() {
        use pb::request::Body;
        let a = authorizer();
        let group = |g: &str| {
            Body::Heartbeat(pb::HeartbeatRequest {
                group_id: g.into(),
                ..Default::default()
            })
        };
        let cases: Vec<(&str, Body, Principal, &str)> = vec![
            (
                "alice writes orders",
                produce(&["orders"], -1),
                user("alice"),
                "serve",
            ),
            (
                "bob may only read orders",
                produce(&["orders"], -1),
                user("bob"),
                "answer",
            ),
            (
                "bob acks=0: nothing to answer",
                produce(&["orders"], 0),
                user("bob"),
                "drop",
            ),
            (
                "alice: one of two topics",
                produce(&["orders", "other"], 1),
                user("alice"),
                "partial",
            ),
            (
                "a super user writes anything",
                produce(&["other"], 1),
                user("admin"),
                "serve",
            ),
            (
                "a broker is not checked",
                produce(&["other"], 1),
                Principal::Broker(2),
                "serve",
            ),
            (
                "anonymous is User:ANONYMOUS",
                produce(&["orders"], 1),
                Principal::Anonymous,
                "answer",
            ),
            ("alice's group", group("g"), user("alice"), "serve"),
            (
                "another group",
                group("h"),
                user("alice"),
                "refuse GroupAuthorizationFailed",
            ),
            (
                "elect leaders needs cluster Alter",
                Body::ElectLeaders(Default::default()),
                user("alice"),
                "refuse ClusterAuthorizationFailed",
            ),
            (
                "bob may not init a producer id (no Write anywhere)",
                Body::InitProducerId(Default::default()),
                user("bob"),
                "refuse ClusterAuthorizationFailed",
            ),
            (
                "alice may (Write on orders)",
                Body::InitProducerId(Default::default()),
                user("alice"),
                "serve",
            ),
            (
                "delete needs Delete",
                Body::DeleteTopics(pb::DeleteTopicsRequest {
                    topics: vec!["orders".into()],
                    forwarded: false,
                }),
                user("alice"),
                "refuse TopicAuthorizationFailed",
            ),
            (
                "create needs Create",
                Body::CreateTopics(pb::CreateTopicsRequest {
                    topics: vec![pb::CreatableTopic {
                        name: "new".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                user("alice"),
                "refuse TopicAuthorizationFailed",
            ),
            (
                "metadata of every topic is filtered",
                Body::Metadata(Default::default()),
                user("bob"),
                "partial",
            ),
            (
                "describe cluster is open",
                Body::DescribeCluster(Default::default()),
                user("bob"),
                "serve",
            ),
            (
                "client quotas are described with cluster DescribeConfigs",
                Body::DescribeClientQuotas(Default::default()),
                user("carol"),
                "serve",
            ),
            (
                "and not without it",
                Body::DescribeClientQuotas(Default::default()),
                user("alice"),
                "refuse ClusterAuthorizationFailed",
            ),
            (
                "client quotas are altered with cluster AlterConfigs",
                Body::AlterClientQuotas(Default::default()),
                user("dave"),
                "serve",
            ),
            (
                "DescribeConfigs does not alter them",
                Body::AlterClientQuotas(Default::default()),
                user("carol"),
                "refuse ClusterAuthorizationFailed",
            ),
        ];
        for (name, body, principal, want) in cases {
            let v = a.check(body, &principal, "127.0.0.1", acls);
            assert_eq!(kind(&v), want, "{name}");
        }
    }

    #[test]
    fn refused_topics_are_answered_beside_the_served_ones() {
        let a = authorizer();
        let Verdict::Partial(pb::request::Body::Produce(served), patch) =
            a.check(produce(&["orders", "other"], 1), &user("alice"), "h", acls)
        else {
            panic!("partial expected");
        };
        assert_eq!(served.topics.len(), 1);
        assert_eq!(served.topics[0].name, "orders");
        let mut response = pb::response::Body::Produce(pb::ProduceResponse {
            topics: vec![pb::ProduceTopicResponse {
                name: "orders".into(),
                partitions: vec![Default::default()],
            }],
            throttle_time_ms: 0,
        });
        patch(&mut response);
        let pb::response::Body::Produce(r) = response else {
            unreachable!()
        };
        let other = r
            .topics
            .iter()
            .find(|t| t.name == "other")
            .expect("answered");
        assert_eq!(
            other.partitions[0].error_code,
            ErrorCode::TopicAuthorizationFailed as i32
        );
        assert!(other.partitions[0].error_message.contains(
            "syncline acl add --allow-principal User:alice --operation Write --topic other"
        ));

        // Metadata: the named topic bob may not describe is answered refused;
        // auto-creation is off for a principal without Create.
        let Verdict::Partial(pb::request::Body::Metadata(m), patch) = a.check(
            pb::request::Body::Metadata(pb::MetadataRequest {
                topics: vec!["orders".into(), "secret".into()],
                allow_auto_topic_creation: true,
                no_topics: false,
            }),
            &user("bob"),
            "h",
            acls,
        ) else {
            panic!("partial expected");
        };
        assert_eq!(m.topics, vec!["orders".to_string()]);
        assert!(!m.allow_auto_topic_creation);
        let mut response = pb::response::Body::Metadata(Default::default());
        patch(&mut response);
        let pb::response::Body::Metadata(r) = response else {
            unreachable!()
        };
        assert_eq!(r.topics[0].name, "secret");
        assert_eq!(
            r.topics[0].error_code,
            ErrorCode::TopicAuthorizationFailed as i32
        );

        // Only topics bob may not describe: what is served asks for no topic
        // (an empty list alone would be every topic, built to be dropped).
        let Verdict::Partial(pb::request::Body::Metadata(m), _) = a.check(
            pb::request::Body::Metadata(pb::MetadataRequest {
                topics: vec!["secret".into()],
                ..Default::default()
            }),
            &user("bob"),
            "h",
            acls,
        ) else {
            panic!("partial expected");
        };
        assert!(m.topics.is_empty() && m.no_topics, "{m:?}");
    }

    #[test]
    fn described_topics_keep_their_configs_only_for_who_may_describe_configs() {
        let a = authorizer();
        let described = |principal: &str| {
            let Verdict::Partial(_, patch) = a.check(
                pb::request::Body::DescribeTopics(pb::DescribeTopicsRequest::default()),
                &user(principal),
                "h",
                acls,
            ) else {
                panic!("partial expected");
            };
            let mut response = pb::response::Body::DescribeTopics(pb::DescribeTopicsResponse {
                topics: ["orders", "other"]
                    .map(|name| pb::TopicDescription {
                        name: name.into(),
                        configs: [("retention.ms".to_string(), "1".to_string())].into(),
                        ..Default::default()
                    })
                    .to_vec(),
            });
            patch(&mut response);
            let pb::response::Body::DescribeTopics(d) = response else {
                unreachable!()
            };
            d.topics
                .iter()
                .map(|t| (t.name.clone(), t.configs.len()))
                .collect::<Vec<_>>()
        };
        // bob reads orders (so describes it) but may not see its configs, nor
        // the other topic at all; the admin sees everything.
        assert_eq!(described("bob"), [("orders".to_string(), 0)]);
        assert_eq!(
            described("admin"),
            [("orders".to_string(), 1), ("other".to_string(), 1)]
        );
    }

    #[test]
    fn all_of_a_groups_offsets_are_only_those_of_topics_it_may_describe() {
        // alice may describe group g and topic orders (Read implies Describe),
        // not topic secret; the group committed offsets on both.
        let a = authorizer();
        let fetched = |principal: &str, all: bool, topics: Vec<pb::OffsetFetchTopic>| {
            let request = pb::request::Body::OffsetFetch(pb::OffsetFetchRequest {
                group_id: "g".into(),
                topics,
                all,
            });
            let mut response = pb::response::Body::OffsetFetch(pb::OffsetFetchResponse {
                error_code: 0,
                topics: ["orders", "secret"]
                    .map(|name| pb::OffsetFetchTopicResult {
                        name: name.into(),
                        partitions: vec![pb::FetchedOffset {
                            partition: 0,
                            offset: 42,
                            ..Default::default()
                        }],
                    })
                    .to_vec(),
            });
            match a.check(request, &user(principal), "h", acls) {
                Verdict::Serve(_) => {}
                Verdict::Partial(_, patch) => patch(&mut response),
                other => return Err(kind(&other)),
            }
            let pb::response::Body::OffsetFetch(f) = response else {
                unreachable!()
            };
            Ok(f.topics.into_iter().map(|t| t.name).collect::<Vec<_>>())
        };
        assert_eq!(
            fetched("alice", true, vec![]),
            Ok(vec!["orders".to_string()])
        );
        assert_eq!(
            fetched("admin", true, vec![]),
            Ok(vec!["orders".to_string(), "secret".to_string()])
        );
        // Named topics are checked one by one, as before.
        let secret = vec![pb::OffsetFetchTopic {
            name: "secret".into(),
            partitions: vec![0],
        }];
        assert_eq!(
            fetched("alice", true, secret.clone()),
            Err("refuse TopicAuthorizationFailed".to_string())
        );
        assert_eq!(
            fetched("alice", false, secret),
            Err("refuse TopicAuthorizationFailed".to_string())
        );
        // Without Describe on the group, nothing.
        assert_eq!(
            fetched("bob", true, vec![]),
            Err("refuse GroupAuthorizationFailed".to_string())
        );
    }

    #[test]
    fn a_disabled_authorizer_serves_everything_and_fetches_are_filtered_per_topic() {
        let off = Authorizer::new(AuthorizerSettings::default(), Default::default());
        assert!(!off.checks(&user("bob")));
        assert!(matches!(
            off.check(produce(&["x"], 1), &user("bob"), "h", acls),
            Verdict::Serve(_)
        ));
        let a = Arc::new(authorizer());
        let may = a.fetch_filter(&user("bob"), "h", acls());
        assert!(may("orders"));
        assert!(!may("other"));
    }
}
