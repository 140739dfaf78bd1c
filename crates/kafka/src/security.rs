//! The security admin APIs (DescribeAcls, CreateAcls, DeleteAcls,
//! DescribeUserScramCredentials, AlterUserScramCredentials) as the syncline
//! requests the broker serves, and back.
//!
//! ACLs carry Kafka's codes on both sides, so they are copied field by field;
//! syncline answers DescribeAcls with a flat list, which Kafka groups by
//! resource. SCRAM mechanisms are Kafka's codes here (1 = SCRAM-SHA-256,
//! 2 = SCRAM-SHA-512) and names in syncline; an upsertion carries the salted
//! password, of which syncline keeps the verifier (stored key and server key)
//! only.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey, CreateAclsRequest,
    CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use syncline_auth::{Mechanism, Verifier};
use syncline_proto::pb;
use syncline_proto::pb::response::Body as Resp;
use syncline_proto::ErrorCode;

use crate::translate::{encode, text, whole_request_error, Reply, Route};

/// Kafka's `ScramMechanism.UNKNOWN`: what a mechanism syncline does not know
/// is answered as.
const MECHANISM_UNKNOWN: i8 = 0;

/// Kafka's code of a SCRAM mechanism.
fn mechanism_code(m: Mechanism) -> i8 {
    match m {
        Mechanism::ScramSha256 => 1,
        Mechanism::ScramSha512 => 2,
    }
}

/// The SCRAM mechanism of Kafka's code.
fn mechanism_of(code: i8) -> Option<Mechanism> {
    Mechanism::ALL
        .into_iter()
        .find(|&m| mechanism_code(m) == code)
}

/// A syncline ACL code as Kafka's `int8` (0, Kafka's UNKNOWN, for one that
/// does not fit).
fn code8(code: i32) -> i8 {
    i8::try_from(code).unwrap_or(0)
}

/// Kafka's nullable message: null when there is none.
fn message(m: &str) -> Option<StrBytes> {
    (!m.is_empty()).then(|| text(m))
}

/// An error code and message.
type Failure = (i16, String);

/// The code and message of a response that refuses the request as a whole:
/// `Resp::Error`, or a response of the right kind whose own `error_code` (as
/// `code_of` reads it) is set; None for an answer to take apart.
fn refusal(resp: &Resp, code_of: impl Fn(&Resp) -> Option<(i32, &str)>) -> Option<Failure> {
    match code_of(resp) {
        Some((code, _)) if code == ErrorCode::None as i32 => None,
        Some((code, m)) => Some((code as i16, m.to_string())),
        None => Some(whole_request_error(resp).unwrap_or((
            ErrorCode::UnknownServerError as i16,
            format!("the broker answered with another response: {resp:?}"),
        ))),
    }
}

/// A Kafka filter's string field as syncline's: null matches any (syncline's
/// empty string); `None` for an empty string, which matches nothing (no ACL
/// has an empty resource name, principal or host), where syncline's empty
/// string would match every ACL.
fn filter_text(field: Option<&StrBytes>) -> Option<String> {
    match field {
        None => Some(String::new()),
        Some(s) if s.is_empty() => None,
        Some(s) => Some(s.to_string()),
    }
}

/// The fields of an ACL filter, as Kafka's requests carry them.
struct FilterFields<'a> {
    resource_type: i8,
    resource_name: Option<&'a StrBytes>,
    pattern_type: i8,
    principal: Option<&'a StrBytes>,
    host: Option<&'a StrBytes>,
    operation: i8,
    permission_type: i8,
}

impl FilterFields<'_> {
    /// syncline's filter; `None` if the filter matches no ACL at all.
    fn to_pb(&self) -> Option<pb::AclBindingFilter> {
        Some(pb::AclBindingFilter {
            resource_type: i32::from(self.resource_type),
            resource_name: filter_text(self.resource_name)?,
            pattern_type: i32::from(self.pattern_type),
            principal: filter_text(self.principal)?,
            host: filter_text(self.host)?,
            operation: i32::from(self.operation),
            permission_type: i32::from(self.permission_type),
        })
    }
}

pub(crate) fn describe_acls(r: DescribeAclsRequest, version: i16, cid: i32) -> Route {
    let filter = FilterFields {
        resource_type: r.resource_type_filter,
        resource_name: r.resource_name_filter.as_ref(),
        pattern_type: r.pattern_type_filter,
        principal: r.principal_filter.as_ref(),
        host: r.host_filter.as_ref(),
        operation: r.operation,
        permission_type: r.permission_type,
    }
    .to_pb();
    // A filter that matches nothing still goes to the broker (as one that
    // matches nothing it knows of), to be authorized and answered with none.
    let matches_nothing = filter.is_none();
    let body = pb::request::Body::DescribeAcls(pb::DescribeAclsRequest {
        filter: Some(filter.unwrap_or_else(|| pb::AclBindingFilter {
            resource_type: i32::from(r.resource_type_filter),
            pattern_type: i32::from(r.pattern_type_filter),
            operation: i32::from(r.operation),
            permission_type: i32::from(r.permission_type),
            ..Default::default()
        })),
    });
    let reply: Reply = Box::new(move |resp| {
        let mut out = DescribeAclsResponse::default();
        let refused = refusal(&resp, |r| match r {
            Resp::DescribeAcls(d) => Some((d.error_code, d.error_message.as_str())),
            _ => None,
        });
        match (refused, resp) {
            (None, Resp::DescribeAcls(d)) => {
                out.error_message = None;
                if !matches_nothing {
                    out.resources = by_resource(&d.acls);
                }
            }
            (refused, _) => {
                let (code, m) = refused.unwrap_or_default();
                out.error_code = code;
                out.error_message = message(&m);
            }
        }
        encode(ApiKey::DescribeAcls, version, cid, &out)
    });
    Route::Broker { body, reply }
}

/// ACLs grouped by resource (type, name, pattern type), in the order the
/// resources first appear.
fn by_resource(acls: &[pb::AclBinding]) -> Vec<DescribeAclsResource> {
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    let mut index: BTreeMap<(i32, &str, i32), usize> = BTreeMap::new();
    for acl in acls {
        let key = (
            acl.resource_type,
            acl.resource_name.as_str(),
            acl.pattern_type,
        );
        let at = *index.entry(key).or_insert_with(|| {
            let mut r = DescribeAclsResource::default();
            r.resource_type = code8(acl.resource_type);
            r.resource_name = text(&acl.resource_name);
            r.pattern_type = code8(acl.pattern_type);
            resources.push(r);
            resources.len() - 1
        });
        let mut d = AclDescription::default();
        d.principal = text(&acl.principal);
        d.host = text(&acl.host);
        d.operation = code8(acl.operation);
        d.permission_type = code8(acl.permission_type);
        resources[at].acls.push(d);
    }
    resources
}

pub(crate) fn create_acls(r: CreateAclsRequest, version: i16, cid: i32) -> Route {
    let asked = r.creations.len();
    let body = pb::request::Body::CreateAcls(pb::CreateAclsRequest {
        creations: r
            .creations
            .iter()
            .map(|c| pb::AclBinding {
                resource_type: i32::from(c.resource_type),
                resource_name: c.resource_name.to_string(),
                pattern_type: i32::from(c.resource_pattern_type),
                principal: c.principal.to_string(),
                host: c.host.to_string(),
                operation: i32::from(c.operation),
                permission_type: i32::from(c.permission_type),
            })
            .collect(),
        forwarded: false,
    });
    let reply: Reply = Box::new(move |resp| {
        let result = |(code, m): Failure| {
            let mut r = AclCreationResult::default();
            r.error_code = code;
            r.error_message = message(&m);
            r
        };
        let refused = refusal(&resp, |r| match r {
            Resp::CreateAcls(c) => Some((c.error_code, c.error_message.as_str())),
            _ => None,
        });
        let mut out = CreateAclsResponse::default();
        out.results =
            match (refused, resp) {
                (None, Resp::CreateAcls(c)) => (0..asked)
                    .map(|i| {
                        result(c.results.get(i).map_or_else(missing, |r| {
                            (r.error_code as i16, r.error_message.clone())
                        }))
                    })
                    .collect(),
                (refused, _) => vec![result(refused.unwrap_or_default()); asked],
            };
        encode(ApiKey::CreateAcls, version, cid, &out)
    });
    Route::Broker { body, reply }
}

/// The answer to an item the broker's response has no result for (a bug).
fn missing() -> Failure {
    (
        ErrorCode::UnknownServerError as i16,
        "the broker's response has no result for this item".to_string(),
    )
}

pub(crate) fn delete_acls(r: DeleteAclsRequest, version: i16, cid: i32) -> Route {
    // Per filter: its place among the filters sent, if it can match at all.
    let mut sent = Vec::new();
    let places: Vec<Option<usize>> = r
        .filters
        .iter()
        .map(|f| {
            let filter = FilterFields {
                resource_type: f.resource_type_filter,
                resource_name: f.resource_name_filter.as_ref(),
                pattern_type: f.pattern_type_filter,
                principal: f.principal_filter.as_ref(),
                host: f.host_filter.as_ref(),
                operation: f.operation,
                permission_type: f.permission_type,
            }
            .to_pb()?;
            sent.push(filter);
            Some(sent.len() - 1)
        })
        .collect();
    let body = pb::request::Body::DeleteAcls(pb::DeleteAclsRequest {
        filters: sent,
        forwarded: false,
    });
    let reply: Reply = Box::new(move |resp| {
        let failed = |(code, m): Failure| {
            let mut r = DeleteAclsFilterResult::default();
            r.error_code = code;
            r.error_message = message(&m);
            r
        };
        let refused = refusal(&resp, |r| match r {
            Resp::DeleteAcls(d) => Some((d.error_code, d.error_message.as_str())),
            _ => None,
        });
        let mut out = DeleteAclsResponse::default();
        out.filter_results = match (refused, resp) {
            (None, Resp::DeleteAcls(d)) => places
                .iter()
                .map(|place| match place.map(|i| d.results.get(i)) {
                    None => failed((ErrorCode::None as i16, String::new())),
                    Some(None) => failed(missing()),
                    Some(Some(r)) => {
                        let mut out = failed((r.error_code as i16, r.error_message.clone()));
                        out.matching_acls = r.deleted.iter().map(matching_acl).collect();
                        out
                    }
                })
                .collect(),
            (refused, _) => vec![failed(refused.unwrap_or_default()); places.len()],
        };
        encode(ApiKey::DeleteAcls, version, cid, &out)
    });
    Route::Broker { body, reply }
}

/// A deleted ACL as DeleteAcls lists it (deleted: no error).
fn matching_acl(acl: &pb::AclBinding) -> DeleteAclsMatchingAcl {
    let mut m = DeleteAclsMatchingAcl::default();
    m.error_code = ErrorCode::None as i16;
    m.error_message = None;
    m.resource_type = code8(acl.resource_type);
    m.resource_name = text(&acl.resource_name);
    m.pattern_type = code8(acl.pattern_type);
    m.principal = text(&acl.principal);
    m.host = text(&acl.host);
    m.operation = code8(acl.operation);
    m.permission_type = code8(acl.permission_type);
    m
}

pub(crate) fn describe_user_scram_credentials(
    r: DescribeUserScramCredentialsRequest,
    version: i16,
    cid: i32,
) -> Route {
    // Null or empty: every user, on both sides.
    let body =
        pb::request::Body::DescribeUserScramCredentials(pb::DescribeUserScramCredentialsRequest {
            users: r
                .users
                .unwrap_or_default()
                .iter()
                .map(|u| u.name.to_string())
                .collect(),
        });
    let reply: Reply = Box::new(move |resp| {
        let mut out = DescribeUserScramCredentialsResponse::default();
        let refused = refusal(&resp, |r| match r {
            Resp::DescribeUserScramCredentials(d) => Some((d.error_code, d.error_message.as_str())),
            _ => None,
        });
        match (refused, resp) {
            (None, Resp::DescribeUserScramCredentials(d)) => {
                out.error_message = None;
                out.results = d
                    .results
                    .iter()
                    .map(|u| {
                        let mut r = DescribeUserScramCredentialsResult::default();
                        r.user = text(&u.user);
                        r.error_code = u.error_code as i16;
                        r.error_message = message(&u.error_message);
                        r.credential_infos = u
                            .credentials
                            .iter()
                            .map(|c| {
                                let mut info = CredentialInfo::default();
                                info.mechanism = Mechanism::from_name(&c.mechanism)
                                    .map_or(MECHANISM_UNKNOWN, mechanism_code);
                                info.iterations = c.iterations;
                                info
                            })
                            .collect();
                        r
                    })
                    .collect();
            }
            (refused, _) => {
                let (code, m) = refused.unwrap_or_default();
                out.error_code = code;
                out.error_message = message(&m);
            }
        }
        encode(ApiKey::DescribeUserScramCredentials, version, cid, &out)
    });
    Route::Broker { body, reply }
}

/// An upsertion as syncline's credential: the verifier of its salted
/// password, or why it cannot be one.
fn credential(u: &ScramCredentialUpsertion) -> Result<pb::ScramCredential, Failure> {
    let name = u.name.as_str();
    let m = mechanism_of(u.mechanism).ok_or_else(|| {
        (
            ErrorCode::UnsupportedSaslMechanism as i16,
            format!(
                "user {name:?}: unknown SCRAM mechanism code {}: use 1 (SCRAM-SHA-256) or \
                 2 (SCRAM-SHA-512)",
                u.mechanism
            ),
        )
    })?;
    // Iterations out of range are the controller's to refuse, with the range.
    let iterations = u32::try_from(u.iterations).unwrap_or(0);
    let verifier = Verifier::from_salted_password(m, &u.salted_password, &u.salt, iterations);
    if u.salted_password.len() != verifier.stored_key.len() {
        return Err((
            ErrorCode::UnacceptableCredential as i16,
            format!(
                "user {name:?}: the salted password has {} bytes, but {m} salted passwords have \
                 {}: salt the password with {m} (PBKDF2 of its hash)",
                u.salted_password.len(),
                verifier.stored_key.len()
            ),
        ));
    }
    Ok(pb::ScramCredential {
        name: name.to_string(),
        mechanism: m.name().to_string(),
        salt: u.salt.clone(),
        iterations: u.iterations,
        stored_key: verifier.stored_key.into(),
        server_key: verifier.server_key.into(),
    })
}

pub(crate) fn alter_user_scram_credentials(
    r: AlterUserScramCredentialsRequest,
    version: i16,
    cid: i32,
) -> Route {
    // Kafka answers per user, in the order users first appear; a user with
    // an alteration refused here has none of them sent (a user's changes are
    // all made or none).
    let mut users: Vec<String> = Vec::new();
    let mut refused: BTreeMap<String, Failure> = BTreeMap::new();
    let mut upsertions = Vec::new();
    let mut deletions = Vec::new();
    for u in &r.upsertions {
        let name = u.name.to_string();
        match credential(u) {
            Ok(c) => upsertions.push(c),
            Err(e) => {
                refused.entry(name.clone()).or_insert(e);
            }
        }
        if !users.contains(&name) {
            users.push(name);
        }
    }
    for d in &r.deletions {
        let name = d.name.to_string();
        match mechanism_of(d.mechanism) {
            Some(m) => deletions.push(pb::ScramCredentialDeletion {
                name: name.clone(),
                mechanism: m.name().to_string(),
            }),
            None => {
                refused.entry(name.clone()).or_insert((
                    ErrorCode::UnsupportedSaslMechanism as i16,
                    format!(
                        "user {name:?}: unknown SCRAM mechanism code {}: use 1 (SCRAM-SHA-256) \
                         or 2 (SCRAM-SHA-512)",
                        d.mechanism
                    ),
                ));
            }
        }
        if !users.contains(&name) {
            users.push(name);
        }
    }
    upsertions.retain(|c| !refused.contains_key(&c.name));
    deletions.retain(|d| !refused.contains_key(&d.name));
    let body = pb::request::Body::AlterUserScramCredentials(pb::AlterUserScramCredentialsRequest {
        upsertions,
        deletions,
        forwarded: false,
    });
    let reply: Reply = Box::new(move |resp| {
        let whole = refusal(&resp, |r| match r {
            Resp::AlterUserScramCredentials(a) => Some((a.error_code, a.error_message.as_str())),
            _ => None,
        });
        let answered: &[pb::AlterUserScramCredentialsResult] = match &resp {
            Resp::AlterUserScramCredentials(a) => &a.results,
            _ => &[],
        };
        let mut out = AlterUserScramCredentialsResponse::default();
        out.results = users
            .iter()
            .map(|user| {
                let (code, m) = match (&whole, refused.get(user)) {
                    (Some(w), _) | (None, Some(w)) => w.clone(),
                    (None, None) => answered
                        .iter()
                        .find(|r| r.user == *user)
                        .map_or_else(missing, |r| (r.error_code as i16, r.error_message.clone())),
                };
                let mut r = AlterUserScramCredentialsResult::default();
                r.user = text(user);
                r.error_code = code;
                r.error_message = message(&m);
                r
            })
            .collect();
        encode(ApiKey::AlterUserScramCredentials, version, cid, &out)
    });
    Route::Broker { body, reply }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::tests::{refused, response, through, versions};
    use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialDeletion;
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;

    /// Kafka's codes the tests use: ANY, MATCH, TOPIC, GROUP, LITERAL,
    /// PREFIXED, READ, WRITE, ALLOW, DENY.
    const ANY: i8 = 1;
    const MATCH: i8 = 2;
    const TOPIC: i8 = 2;
    const GROUP: i8 = 3;
    const LITERAL: i8 = 3;
    const PREFIXED: i8 = 4;
    const READ: i8 = 3;
    const WRITE: i8 = 4;
    const DENY: i8 = 2;
    const ALLOW: i8 = 3;

    fn acl(kind: i8, name: &str, pattern: i8, principal: &str, op: i8, perm: i8) -> pb::AclBinding {
        pb::AclBinding {
            resource_type: i32::from(kind),
            resource_name: name.into(),
            pattern_type: i32::from(pattern),
            principal: principal.into(),
            host: "*".into(),
            operation: i32::from(op),
            permission_type: i32::from(perm),
        }
    }

    /// A whole request answered by the controller's broker with its own
    /// error_code, as a forwarded request is when no controller is active.
    fn not_controller() -> (i32, String) {
        (
            ErrorCode::NotController as i32,
            "no active controller".to_string(),
        )
    }

    #[test]
    fn describe_acls_filters_as_syncline_does_and_groups_the_answer_by_resource() {
        let mut request = DescribeAclsRequest::default();
        request.resource_type_filter = TOPIC;
        request.resource_name_filter = Some(text("orders"));
        request.pattern_type_filter = MATCH;
        request.principal_filter = None;
        request.host_filter = None;
        request.operation = ANY;
        request.permission_type = ANY;
        let answer = || {
            Resp::DescribeAcls(pb::DescribeAclsResponse {
                acls: vec![
                    acl(TOPIC, "orders", LITERAL, "User:alice", READ, ALLOW),
                    acl(TOPIC, "orders", LITERAL, "User:bob", WRITE, DENY),
                    acl(TOPIC, "ord", PREFIXED, "User:alice", WRITE, ALLOW),
                ],
                ..Default::default()
            })
        };
        for version in versions(ApiKey::DescribeAcls) {
            let (body, reply) = through(ApiKey::DescribeAcls, version, &request);
            assert_eq!(
                body,
                pb::request::Body::DescribeAcls(pb::DescribeAclsRequest {
                    filter: Some(pb::AclBindingFilter {
                        resource_type: 2,
                        resource_name: "orders".into(),
                        pattern_type: 2,
                        principal: String::new(),
                        host: String::new(),
                        operation: 1,
                        permission_type: 1,
                    }),
                }),
                "v{version}: null strings match any"
            );
            let r: DescribeAclsResponse = response(ApiKey::DescribeAcls, version, reply(answer()));
            assert_eq!((r.error_code, r.error_message.as_ref()), (0, None));
            let resources: Vec<(i8, &str, i8, usize)> = r
                .resources
                .iter()
                .map(|res| {
                    let name = res.resource_name.as_str();
                    (res.resource_type, name, res.pattern_type, res.acls.len())
                })
                .collect();
            assert_eq!(
                resources,
                [(TOPIC, "orders", LITERAL, 2), (TOPIC, "ord", PREFIXED, 1)],
                "v{version}"
            );
            let bob = &r.resources[0].acls[1];
            assert_eq!(
                (bob.principal.as_str(), bob.host.as_str()),
                ("User:bob", "*")
            );
            assert_eq!((bob.operation, bob.permission_type), (WRITE, DENY));

            // Refused as a whole, or refused by the broker's own answer.
            let (_, reply) = through(ApiKey::DescribeAcls, version, &request);
            let r: DescribeAclsResponse = response(ApiKey::DescribeAcls, version, reply(refused()));
            assert_eq!(r.error_code, 31, "v{version}");
            assert_eq!(
                r.error_message.as_deref(),
                Some("cluster authorization failed")
            );
            let (_, reply) = through(ApiKey::DescribeAcls, version, &request);
            let invalid = Resp::DescribeAcls(pb::DescribeAclsResponse {
                error_code: ErrorCode::InvalidRequest as i32,
                error_message: "invalid ACL filter: bad".into(),
                acls: vec![],
            });
            let r: DescribeAclsResponse = response(ApiKey::DescribeAcls, version, reply(invalid));
            assert_eq!(r.error_code, ErrorCode::InvalidRequest as i16);
            assert!(r.resources.is_empty());
        }
        // An empty principal matches no ACL (syncline's empty string would
        // match every one): asked and authorized, answered with none.
        let mut nothing = request.clone();
        nothing.principal_filter = Some(text(""));
        for version in versions(ApiKey::DescribeAcls) {
            let (body, reply) = through(ApiKey::DescribeAcls, version, &nothing);
            assert!(matches!(body, pb::request::Body::DescribeAcls(_)));
            let r: DescribeAclsResponse = response(ApiKey::DescribeAcls, version, reply(answer()));
            assert_eq!((r.error_code, r.resources.len()), (0, 0), "v{version}");
        }
    }

    #[test]
    fn create_acls_copies_the_codes_and_answers_each_creation_in_order() {
        let creation = |kind: i8, name: &str, principal: &str, op: i8| {
            let mut c = AclCreation::default();
            c.resource_type = kind;
            c.resource_name = text(name);
            c.resource_pattern_type = PREFIXED;
            c.principal = text(principal);
            c.host = text("*");
            c.operation = op;
            c.permission_type = ALLOW;
            c
        };
        let mut request = CreateAclsRequest::default();
        request.creations = vec![
            creation(TOPIC, "orders-", "User:alice", WRITE),
            creation(GROUP, "billing", "User:bob", READ),
        ];
        for version in versions(ApiKey::CreateAcls) {
            let (body, reply) = through(ApiKey::CreateAcls, version, &request);
            assert_eq!(
                body,
                pb::request::Body::CreateAcls(pb::CreateAclsRequest {
                    creations: vec![
                        acl(TOPIC, "orders-", PREFIXED, "User:alice", WRITE, ALLOW),
                        acl(GROUP, "billing", PREFIXED, "User:bob", READ, ALLOW),
                    ],
                    forwarded: false,
                }),
                "v{version}"
            );
            let answer = Resp::CreateAcls(pb::CreateAclsResponse {
                results: vec![
                    pb::AclResult::default(),
                    pb::AclResult {
                        error_code: ErrorCode::InvalidRequest as i32,
                        error_message: "operation Write is not valid on a group".into(),
                    },
                ],
                ..Default::default()
            });
            let r: CreateAclsResponse = response(ApiKey::CreateAcls, version, reply(answer));
            let results: Vec<(i16, Option<&str>)> = r
                .results
                .iter()
                .map(|r| (r.error_code, r.error_message.as_deref()))
                .collect();
            assert_eq!(
                results,
                [
                    (0, None),
                    (42, Some("operation Write is not valid on a group"))
                ],
                "v{version}"
            );
            let (_, reply) = through(ApiKey::CreateAcls, version, &request);
            let r: CreateAclsResponse = response(ApiKey::CreateAcls, version, reply(refused()));
            let codes: Vec<i16> = r.results.iter().map(|r| r.error_code).collect();
            assert_eq!(codes, [31, 31], "v{version}");
            let (_, reply) = through(ApiKey::CreateAcls, version, &request);
            let (error_code, error_message) = not_controller();
            let whole = Resp::CreateAcls(pb::CreateAclsResponse {
                error_code,
                error_message,
                results: vec![],
            });
            let r: CreateAclsResponse = response(ApiKey::CreateAcls, version, reply(whole));
            let codes: Vec<i16> = r.results.iter().map(|r| r.error_code).collect();
            assert_eq!(codes, [41, 41], "v{version}");
            assert_eq!(
                r.results[0].error_message.as_deref(),
                Some("no active controller")
            );
        }
    }

    #[test]
    fn delete_acls_lists_what_each_filter_deleted() {
        let filter = |principal: Option<&str>| {
            let mut f = DeleteAclsFilter::default();
            f.resource_type_filter = ANY;
            f.resource_name_filter = None;
            f.pattern_type_filter = ANY;
            f.principal_filter = principal.map(text);
            f.host_filter = None;
            f.operation = ANY;
            f.permission_type = ANY;
            f
        };
        let mut request = DeleteAclsRequest::default();
        // The second filter's empty principal matches nothing: not sent.
        request.filters = vec![filter(Some("User:alice")), filter(Some("")), filter(None)];
        let any = |principal: &str| pb::AclBindingFilter {
            resource_type: 1,
            pattern_type: 1,
            principal: principal.into(),
            operation: 1,
            permission_type: 1,
            ..Default::default()
        };
        let deleted = vec![
            acl(TOPIC, "orders", LITERAL, "User:alice", READ, ALLOW),
            acl(TOPIC, "ord", PREFIXED, "User:alice", WRITE, DENY),
        ];
        for version in versions(ApiKey::DeleteAcls) {
            let (body, reply) = through(ApiKey::DeleteAcls, version, &request);
            assert_eq!(
                body,
                pb::request::Body::DeleteAcls(pb::DeleteAclsRequest {
                    filters: vec![any("User:alice"), any("")],
                    forwarded: false,
                }),
                "v{version}"
            );
            let answer = Resp::DeleteAcls(pb::DeleteAclsResponse {
                results: vec![
                    pb::DeleteAclsFilterResult {
                        deleted: deleted.clone(),
                        ..Default::default()
                    },
                    pb::DeleteAclsFilterResult {
                        error_code: ErrorCode::InvalidRequest as i32,
                        error_message: "bad filter".into(),
                        deleted: vec![],
                    },
                ],
                ..Default::default()
            });
            let r: DeleteAclsResponse = response(ApiKey::DeleteAcls, version, reply(answer));
            assert_eq!(r.filter_results.len(), 3, "v{version}");
            let alice = &r.filter_results[0];
            assert_eq!(alice.error_code, 0);
            // Each deleted ACL as it was, with no error of its own.
            let matched: Vec<(i16, pb::AclBinding)> = alice
                .matching_acls
                .iter()
                .map(|m| {
                    let binding = pb::AclBinding {
                        resource_type: i32::from(m.resource_type),
                        resource_name: m.resource_name.to_string(),
                        pattern_type: i32::from(m.pattern_type),
                        principal: m.principal.to_string(),
                        host: m.host.to_string(),
                        operation: i32::from(m.operation),
                        permission_type: i32::from(m.permission_type),
                    };
                    (m.error_code, binding)
                })
                .collect();
            let expected: Vec<(i16, pb::AclBinding)> =
                deleted.iter().map(|d| (0, d.clone())).collect();
            assert_eq!(matched, expected, "v{version}");
            let nothing = &r.filter_results[1];
            assert_eq!((nothing.error_code, nothing.matching_acls.len()), (0, 0));
            assert_eq!(nothing.error_message, None);
            assert_eq!(alice.matching_acls[0].error_message, None);
            assert_eq!(r.filter_results[2].error_code, 42);
            assert_eq!(
                r.filter_results[2].error_message.as_deref(),
                Some("bad filter")
            );

            let (_, reply) = through(ApiKey::DeleteAcls, version, &request);
            let r: DeleteAclsResponse = response(ApiKey::DeleteAcls, version, reply(refused()));
            let codes: Vec<i16> = r.filter_results.iter().map(|f| f.error_code).collect();
            assert_eq!(codes, [31, 31, 31], "v{version}");
            let (_, reply) = through(ApiKey::DeleteAcls, version, &request);
            let (error_code, error_message) = not_controller();
            let whole = Resp::DeleteAcls(pb::DeleteAclsResponse {
                error_code,
                error_message,
                results: vec![],
            });
            let r: DeleteAclsResponse = response(ApiKey::DeleteAcls, version, reply(whole));
            let codes: Vec<i16> = r.filter_results.iter().map(|f| f.error_code).collect();
            assert_eq!(codes, [41, 41, 41], "v{version}");
        }
    }

    #[test]
    fn describe_user_scram_credentials_answers_kafkas_mechanism_codes() {
        let answer = || {
            Resp::DescribeUserScramCredentials(pb::DescribeUserScramCredentialsResponse {
                results: vec![
                    pb::UserScramCredentialsDescription {
                        user: "alice".into(),
                        credentials: vec![
                            pb::ScramCredentialInfo {
                                mechanism: "SCRAM-SHA-256".into(),
                                iterations: 4096,
                            },
                            pb::ScramCredentialInfo {
                                mechanism: "SCRAM-SHA-512".into(),
                                iterations: 8192,
                            },
                        ],
                        ..Default::default()
                    },
                    pb::UserScramCredentialsDescription {
                        user: "bob".into(),
                        error_code: ErrorCode::ResourceNotFound as i32,
                        error_message: "user \"bob\" has no SCRAM credentials".into(),
                        credentials: vec![],
                    },
                ],
                ..Default::default()
            })
        };
        let named = |names: &[&str]| {
            let mut r = DescribeUserScramCredentialsRequest::default();
            r.users = Some(
                names
                    .iter()
                    .map(|n| {
                        let mut u = UserName::default();
                        u.name = text(n);
                        u
                    })
                    .collect(),
            );
            r
        };
        let mut all = DescribeUserScramCredentialsRequest::default();
        all.users = None;
        let api = ApiKey::DescribeUserScramCredentials;
        for version in versions(api) {
            for (request, users) in [
                (all.clone(), vec![]),
                (named(&[]), vec![]),
                (named(&["alice", "bob"]), vec!["alice", "bob"]),
            ] {
                let (body, _) = through(api, version, &request);
                assert_eq!(
                    body,
                    pb::request::Body::DescribeUserScramCredentials(
                        pb::DescribeUserScramCredentialsRequest {
                            users: users.into_iter().map(String::from).collect(),
                        }
                    ),
                    "v{version}"
                );
            }
            let (_, reply) = through(api, version, &named(&["alice", "bob"]));
            let r: DescribeUserScramCredentialsResponse = response(api, version, reply(answer()));
            assert_eq!((r.error_code, r.error_message), (0, None));
            let alice = &r.results[0];
            let infos: Vec<(i8, i32)> = alice
                .credential_infos
                .iter()
                .map(|c| (c.mechanism, c.iterations))
                .collect();
            assert_eq!(
                (alice.user.as_str(), alice.error_code, infos),
                ("alice", 0, vec![(1, 4096), (2, 8192)])
            );
            let bob = &r.results[1];
            assert_eq!((bob.user.as_str(), bob.error_code), ("bob", 91));
            assert_eq!(
                bob.error_message.as_deref(),
                Some("user \"bob\" has no SCRAM credentials")
            );
            let (_, reply) = through(api, version, &all);
            let r: DescribeUserScramCredentialsResponse = response(api, version, reply(refused()));
            assert_eq!(
                (r.error_code, r.error_message.as_deref(), r.results.len()),
                (31, Some("cluster authorization failed"), 0)
            );
        }
    }

    #[test]
    fn alter_user_scram_credentials_sends_the_verifiers_of_salted_passwords() {
        let upsertion = |name: &str, mechanism: i8, salted: &[u8]| {
            let mut u = ScramCredentialUpsertion::default();
            u.name = text(name);
            u.mechanism = mechanism;
            u.iterations = 8192;
            u.salt = bytes::Bytes::from_static(b"pinch of salt");
            u.salted_password = bytes::Bytes::copy_from_slice(salted);
            u
        };
        let deletion = |name: &str, mechanism: i8| {
            let mut d = ScramCredentialDeletion::default();
            d.name = text(name);
            d.mechanism = mechanism;
            d
        };
        let salted = [7u8; 64];
        let mut request = AlterUserScramCredentialsRequest::default();
        request.upsertions = vec![
            upsertion("alice", 2, &salted),
            // Too short for SCRAM-SHA-256: carol's deletion is not sent either.
            upsertion("carol", 1, &salted[..10]),
        ];
        request.deletions = vec![
            deletion("carol", 2),
            deletion("dave", 2),
            deletion("erin", 7),
        ];
        let expected =
            Verifier::from_salted_password(Mechanism::ScramSha512, &salted, b"pinch of salt", 8192);
        let api = ApiKey::AlterUserScramCredentials;
        for version in versions(api) {
            let (body, reply) = through(api, version, &request);
            assert_eq!(
                body,
                pb::request::Body::AlterUserScramCredentials(
                    pb::AlterUserScramCredentialsRequest {
                        upsertions: vec![pb::ScramCredential {
                            name: "alice".into(),
                            mechanism: "SCRAM-SHA-512".into(),
                            salt: bytes::Bytes::from_static(b"pinch of salt"),
                            iterations: 8192,
                            stored_key: expected.stored_key.clone().into(),
                            server_key: expected.server_key.clone().into(),
                        }],
                        deletions: vec![pb::ScramCredentialDeletion {
                            name: "dave".into(),
                            mechanism: "SCRAM-SHA-512".into(),
                        }],
                        forwarded: false,
                    }
                ),
                "v{version}"
            );
            let answer = Resp::AlterUserScramCredentials(pb::AlterUserScramCredentialsResponse {
                results: vec![
                    pb::AlterUserScramCredentialsResult {
                        user: "alice".into(),
                        ..Default::default()
                    },
                    pb::AlterUserScramCredentialsResult {
                        user: "dave".into(),
                        error_code: ErrorCode::ResourceNotFound as i32,
                        error_message: "user \"dave\" has no SCRAM-SHA-512 credential".into(),
                    },
                ],
                ..Default::default()
            });
            let r: AlterUserScramCredentialsResponse = response(api, version, reply(answer));
            let results: Vec<(&str, i16)> = r
                .results
                .iter()
                .map(|r| (r.user.as_str(), r.error_code))
                .collect();
            assert_eq!(
                results,
                [("alice", 0), ("carol", 93), ("dave", 91), ("erin", 33)],
                "v{version}: each user once, in the order first named"
            );
            let carol = r.results[1].error_message.as_deref().unwrap();
            assert!(carol.contains("10 bytes"), "{carol}");
            assert_eq!(r.results[0].error_message, None);

            let (_, reply) = through(api, version, &request);
            let r: AlterUserScramCredentialsResponse = response(api, version, reply(refused()));
            let codes: Vec<i16> = r.results.iter().map(|r| r.error_code).collect();
            assert_eq!(codes, [31, 31, 31, 31], "v{version}");
            let (_, reply) = through(api, version, &request);
            let (error_code, error_message) = not_controller();
            let whole = Resp::AlterUserScramCredentials(pb::AlterUserScramCredentialsResponse {
                error_code,
                error_message,
                results: vec![],
            });
            let r: AlterUserScramCredentialsResponse = response(api, version, reply(whole));
            let codes: Vec<i16> = r.results.iter().map(|r| r.error_code).collect();
            assert_eq!(codes, [41, 41, 41, 41], "v{version}");
        }
    }

    #[test]
    fn every_security_api_is_advertised_at_the_versions_decoded() {
        let advertised = crate::codec::api_versions(0);
        for (api, min, max) in [
            (ApiKey::DescribeAcls, 1, 2),
            (ApiKey::CreateAcls, 1, 2),
            (ApiKey::DeleteAcls, 1, 2),
            (ApiKey::DescribeUserScramCredentials, 0, 0),
            (ApiKey::AlterUserScramCredentials, 0, 0),
        ] {
            let k = advertised
                .api_keys
                .iter()
                .find(|k| k.api_key == api as i16)
                .unwrap_or_else(|| panic!("{api:?} is not advertised"));
            assert_eq!((k.min_version, k.max_version), (min, max), "{api:?}");
        }
    }
}
