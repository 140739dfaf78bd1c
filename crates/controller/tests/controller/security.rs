//! Users and ACLs: AlterUserScramCredentials, CreateAcls, DeleteAcls, the bootstrap
//! users, and their records through replay and snapshots.

use syncline_auth::acl::{AclBinding, Operation, PatternType, Permission, ResourceType};
use syncline_auth::Mechanism;
use syncline_controller::{security_changed, MetadataImage};
use syncline_proto::{pb, ErrorCode};

use crate::support::Cluster;

const SHA256: &str = "SCRAM-SHA-256";
const SHA512: &str = "SCRAM-SHA-512";

/// A well-formed credential (its keys are made up: nothing here logs in).
fn credential(name: &str, mechanism: &str) -> pb::ScramCredential {
    let len = if mechanism == SHA512 { 64 } else { 32 };
    pb::ScramCredential {
        name: name.to_owned(),
        mechanism: mechanism.to_owned(),
        salt: vec![1; 16].into(),
        iterations: 4096,
        stored_key: vec![2; len].into(),
        server_key: vec![3; len].into(),
    }
}

fn deletion(name: &str, mechanism: &str) -> pb::ScramCredentialDeletion {
    pb::ScramCredentialDeletion {
        name: name.to_owned(),
        mechanism: mechanism.to_owned(),
    }
}

fn alter(
    upsertions: Vec<pb::ScramCredential>,
    deletions: Vec<pb::ScramCredentialDeletion>,
) -> pb::AlterUserScramCredentialsRequest {
    pb::AlterUserScramCredentialsRequest {
        upsertions,
        deletions,
        forwarded: false,
    }
}

/// Commits the request; each user's result code and message.
fn commit_alter(
    cl: &mut Cluster,
    req: &pb::AlterUserScramCredentialsRequest,
) -> Vec<(String, ErrorCode, String)> {
    let r = cl.c.alter_user_scram_credentials(req);
    let resp = cl.commit(r);
    assert_eq!(resp.error_code, 0, "{resp:?}");
    resp.results
        .into_iter()
        .map(|r| (r.user, ErrorCode::from_wire(r.error_code), r.error_message))
        .collect()
}

fn mechanisms(cl: &Cluster, user: &str) -> Vec<String> {
    cl.c.image()
        .scram_credentials()
        .filter(|c| c.name == user)
        .map(|c| c.mechanism.clone())
        .collect()
}

#[test]
fn credentials_are_set_replaced_and_deleted_and_survive_replay_and_snapshots() {
    let mut cl = Cluster::with_brokers(&[1]);
    assert!(!cl.c.image().users_initialized());
    let r = cl.c.alter_user_scram_credentials(&alter(
        vec![credential("alice", SHA256), credential("alice", SHA512)],
        vec![],
    ));
    assert_eq!(r.records.len(), 2);
    assert!(security_changed(&r.records));
    let resp = cl.commit(r);
    assert_eq!(resp.results.len(), 1, "one result per user: {resp:?}");
    assert_eq!(resp.results[0].error_code, 0, "{resp:?}");
    assert_eq!(mechanisms(&cl, "alice"), vec![SHA256, SHA512]);
    assert!(cl.c.image().users_initialized());
    cl.assert_replays_and_snapshots();

    // Replaced: the new verifier wins.
    let mut replacement = credential("alice", SHA256);
    replacement.iterations = 8192;
    let results = commit_alter(&mut cl, &alter(vec![replacement.clone()], vec![]));
    assert_eq!(results[0].1, ErrorCode::None);
    assert_eq!(
        cl.c.image()
            .scram_credential("alice", Mechanism::ScramSha256),
        Some(&replacement)
    );

    // One mechanism deleted, the other kept; then the last one.
    let results = commit_alter(&mut cl, &alter(vec![], vec![deletion("alice", SHA512)]));
    assert_eq!(results[0].1, ErrorCode::None);
    assert_eq!(mechanisms(&cl, "alice"), vec![SHA256]);
    commit_alter(&mut cl, &alter(vec![], vec![deletion("alice", SHA256)]));
    assert_eq!(cl.c.image().scram_credentials().count(), 0);
    // Users stay initialized: the bootstrap users never come back.
    assert!(cl.c.image().users_initialized());
    cl.assert_replays_and_snapshots();
}

#[test]
fn every_refusal_of_a_user_change_names_the_problem() {
    let mut cl = Cluster::with_brokers(&[1]);
    commit_alter(&mut cl, &alter(vec![credential("kept", SHA256)], vec![]));
    let with = |name: &str, f: fn(&mut pb::ScramCredential)| {
        let mut c = credential(name, SHA256);
        f(&mut c);
        c
    };
    type Case = (
        &'static str,
        pb::AlterUserScramCredentialsRequest,
        ErrorCode,
        &'static str,
    );
    let long = "x".repeat(256);
    let cases: Vec<Case> = vec![
        (
            "empty name",
            alter(vec![credential("", SHA256)], vec![]),
            ErrorCode::UnacceptableCredential,
            "empty",
        ),
        (
            "long name",
            alter(vec![credential(&long, SHA256)], vec![]),
            ErrorCode::UnacceptableCredential,
            "the limit is 255",
        ),
        (
            "whitespace",
            alter(vec![credential("a b", SHA256)], vec![]),
            ErrorCode::UnacceptableCredential,
            "whitespace",
        ),
        (
            "broker name",
            alter(vec![credential("broker-1", SHA256)], vec![]),
            ErrorCode::UnacceptableCredential,
            "reserved for broker 1",
        ),
        (
            "broker name deleted",
            alter(vec![], vec![deletion("broker-2", SHA256)]),
            ErrorCode::UnacceptableCredential,
            "reserved for broker 2",
        ),
        (
            "unknown mechanism",
            alter(vec![credential("a", "SCRAM-MD5")], vec![]),
            ErrorCode::UnsupportedSaslMechanism,
            "SCRAM-SHA-256 or SCRAM-SHA-512",
        ),
        (
            "unknown mechanism deleted",
            alter(vec![], vec![deletion("kept", "PLAIN")]),
            ErrorCode::UnsupportedSaslMechanism,
            "unknown SCRAM mechanism",
        ),
        (
            "few iterations",
            alter(vec![with("a", |c| c.iterations = 4095)], vec![]),
            ErrorCode::UnacceptableCredential,
            "4096 to 1000000",
        ),
        (
            "many iterations",
            alter(vec![with("a", |c| c.iterations = 1_000_001)], vec![]),
            ErrorCode::UnacceptableCredential,
            "out of range",
        ),
        (
            "no salt",
            alter(vec![with("a", |c| c.salt = Default::default())], vec![]),
            ErrorCode::UnacceptableCredential,
            "empty salt",
        ),
        (
            "short stored key",
            alter(
                vec![with("a", |c| c.stored_key = vec![0; 31].into())],
                vec![],
            ),
            ErrorCode::UnacceptableCredential,
            "stored_key has 31 bytes",
        ),
        (
            "long server key",
            alter(
                vec![with("a", |c| c.server_key = vec![0; 64].into())],
                vec![],
            ),
            ErrorCode::UnacceptableCredential,
            "server_key has 64 bytes",
        ),
        (
            "missing credential",
            alter(vec![], vec![deletion("kept", SHA512)]),
            ErrorCode::ResourceNotFound,
            "no SCRAM-SHA-512 credential",
        ),
        (
            "unknown user",
            alter(vec![], vec![deletion("nobody", SHA256)]),
            ErrorCode::ResourceNotFound,
            "\"nobody\"",
        ),
        (
            "twice",
            alter(
                vec![credential("a", SHA256), credential("a", SHA256)],
                vec![],
            ),
            ErrorCode::DuplicateResource,
            "more than once",
        ),
        (
            "set and deleted",
            alter(
                vec![credential("kept", SHA256)],
                vec![deletion("kept", SHA256)],
            ),
            ErrorCode::DuplicateResource,
            "more than once",
        ),
    ];
    for (what, req, code, words) in cases {
        let before = cl.c.image().clone();
        let r = cl.c.alter_user_scram_credentials(&req);
        assert!(r.records.is_empty(), "{what}: {r:?}");
        let resp = cl.commit(r);
        assert_eq!(resp.results.len(), 1, "{what}: {resp:?}");
        let result = &resp.results[0];
        assert_eq!(
            ErrorCode::from_wire(result.error_code),
            code,
            "{what}: {result:?}"
        );
        assert!(result.error_message.contains(words), "{what}: {result:?}");
        assert_eq!(cl.c.image(), &before, "{what}");
    }
}

#[test]
fn a_users_changes_are_all_made_or_none_and_other_users_are_unaffected() {
    let mut cl = Cluster::with_brokers(&[1]);
    let mut bad = credential("carol", SHA512);
    bad.iterations = 1;
    let results = commit_alter(
        &mut cl,
        &alter(
            vec![credential("carol", SHA256), credential("dave", SHA256), bad],
            vec![deletion("erin", SHA256)],
        ),
    );
    let codes: Vec<(&str, ErrorCode)> = results.iter().map(|(u, c, _)| (u.as_str(), *c)).collect();
    assert_eq!(
        codes,
        vec![
            ("carol", ErrorCode::UnacceptableCredential),
            ("dave", ErrorCode::None),
            ("erin", ErrorCode::ResourceNotFound),
        ]
    );
    assert!(
        mechanisms(&cl, "carol").is_empty(),
        "carol's valid change is not made either"
    );
    assert_eq!(mechanisms(&cl, "dave"), vec![SHA256]);
}

#[test]
fn bootstrap_users_are_added_once_in_the_clusters_life() {
    let mut cl = Cluster::with_brokers(&[1]);
    let users = vec![
        credential("admin", SHA256),
        credential("admin", SHA256),
        credential("broker-1", SHA256),
        credential("ops", SHA512),
    ];
    let r = cl.c.bootstrap_scram_credentials(&users);
    assert!(security_changed(&r.records));
    assert_eq!(
        cl.commit(r),
        2,
        "the repeat and the broker's name are skipped"
    );
    assert_eq!(mechanisms(&cl, "admin"), vec![SHA256]);
    assert_eq!(mechanisms(&cl, "ops"), vec![SHA512]);
    // A later controller: users are initialized, nothing again.
    commit_alter(&mut cl, &alter(vec![], vec![deletion("admin", SHA256)]));
    let r = cl.c.bootstrap_scram_credentials(&users);
    assert!(r.records.is_empty());
    assert_eq!(cl.commit(r), 0);
    assert!(mechanisms(&cl, "admin").is_empty());

    // Users made by hand first: the bootstrap file is not used.
    let mut cl = Cluster::with_brokers(&[1]);
    commit_alter(&mut cl, &alter(vec![credential("first", SHA256)], vec![]));
    assert!(cl.c.bootstrap_scram_credentials(&users).records.is_empty());
    // An empty file leaves users uninitialized.
    let cl = Cluster::with_brokers(&[1]);
    assert!(cl.c.bootstrap_scram_credentials(&[]).records.is_empty());
}

fn acl(principal: &str, op: Operation, topic: &str, pattern: PatternType) -> AclBinding {
    AclBinding {
        resource_type: ResourceType::Topic,
        resource_name: topic.to_owned(),
        pattern_type: pattern,
        principal: principal.to_owned(),
        host: "*".to_owned(),
        operation: op,
        permission: Permission::Allow,
    }
}

fn create(cl: &mut Cluster, acls: Vec<pb::AclBinding>) -> (Vec<(ErrorCode, String)>, usize) {
    let r = cl.c.create_acls(&pb::CreateAclsRequest {
        creations: acls,
        forwarded: false,
    });
    let records = r.records.len();
    assert!(records == 0 || security_changed(&r.records));
    let resp = cl.commit(r);
    assert_eq!(resp.error_code, 0);
    let results = resp
        .results
        .into_iter()
        .map(|r| (ErrorCode::from_wire(r.error_code), r.error_message))
        .collect();
    (results, records)
}

#[test]
fn acls_are_created_once_and_invalid_ones_refused_with_the_reason() {
    let mut cl = Cluster::with_brokers(&[1]);
    let read = acl(
        "User:alice",
        Operation::Read,
        "orders",
        PatternType::Literal,
    );
    let write = acl("User:bob", Operation::Write, "logs-", PatternType::Prefixed);
    let (results, records) = create(&mut cl, vec![read.to_pb(), read.to_pb(), write.to_pb()]);
    assert!(
        results.iter().all(|(c, _)| *c == ErrorCode::None),
        "{results:?}"
    );
    assert_eq!(records, 2, "a repeat within the request is one record");
    assert_eq!(cl.c.image().acls().cloned().collect::<Vec<_>>(), {
        let mut v = vec![read.clone(), write.clone()];
        v.sort();
        v
    });
    // Again: nothing to record.
    let (results, records) = create(&mut cl, vec![read.to_pb()]);
    assert_eq!((results[0].0, records), (ErrorCode::None, 0));

    type Damage = fn(&mut pb::AclBinding);
    let cases: Vec<(&str, Damage, &str)> = vec![
        (
            "unknown resource type",
            |a| a.resource_type = 1,
            "resource_type",
        ),
        ("any pattern", |a| a.pattern_type = 1, "pattern_type"),
        ("unknown operation", |a| a.operation = 99, "operation"),
        (
            "unknown permission",
            |a| a.permission_type = 0,
            "permission_type",
        ),
        (
            "bad principal",
            |a| a.principal = "alice".into(),
            "User:NAME",
        ),
        ("host name", |a| a.host = "example.com".into(), "IP"),
        ("empty name", |a| a.resource_name.clear(), "empty"),
        ("cluster name", |a| a.resource_type = 4, "kafka-cluster"),
        ("group write", |a| a.resource_type = 3, "not valid for"),
    ];
    for (what, damage, words) in cases {
        let mut bad = acl("User:carol", Operation::Write, "t", PatternType::Literal).to_pb();
        damage(&mut bad);
        let (results, records) = create(&mut cl, vec![bad, write.to_pb()]);
        assert_eq!(records, 0, "{what}");
        assert_eq!(
            results[0].0,
            ErrorCode::InvalidRequest,
            "{what}: {results:?}"
        );
        assert!(results[0].1.contains(words), "{what}: {results:?}");
        assert_eq!(
            results[1].0,
            ErrorCode::None,
            "{what}: the others are created"
        );
    }
    assert_eq!(cl.c.image().acls().count(), 2);
    cl.assert_replays_and_snapshots();
}

fn filter(principal: &str, resource_name: &str, pattern_type: i32) -> pb::AclBindingFilter {
    pb::AclBindingFilter {
        resource_type: 1,
        resource_name: resource_name.to_owned(),
        pattern_type,
        principal: principal.to_owned(),
        host: String::new(),
        operation: 1,
        permission_type: 1,
    }
}

#[test]
fn acls_are_deleted_by_filter_each_result_listing_what_it_matched() {
    let mut cl = Cluster::with_brokers(&[1]);
    let a = acl(
        "User:alice",
        Operation::Read,
        "orders",
        PatternType::Literal,
    );
    let b = acl("User:alice", Operation::Write, "ord", PatternType::Prefixed);
    let c = acl("User:bob", Operation::Read, "orders", PatternType::Literal);
    let d = acl("User:bob", Operation::Read, "other", PatternType::Literal);
    create(&mut cl, vec![a.to_pb(), b.to_pb(), c.to_pb(), d.to_pb()]);

    let r = cl.c.delete_acls(&pb::DeleteAclsRequest {
        filters: vec![
            filter("User:alice", "", 1),
            // MATCH: what applies to topic "orders": a and c (literal) and b (prefixed).
            filter("", "orders", 2),
            filter("", "", 99),
            filter("User:nobody", "", 1),
        ],
        forwarded: false,
    });
    assert_eq!(r.records.len(), 3, "a, b, c removed once each: {r:?}");
    assert!(security_changed(&r.records));
    let resp = cl.commit(r);
    let deleted = |i: usize| -> Vec<AclBinding> {
        resp.results[i]
            .deleted
            .iter()
            .map(|p| AclBinding::from_pb(p).unwrap())
            .collect()
    };
    let mut alice = vec![a.clone(), b.clone()];
    alice.sort();
    assert_eq!(deleted(0), alice);
    let mut orders = vec![a, b, c];
    orders.sort();
    assert_eq!(deleted(1), orders);
    assert_eq!(
        ErrorCode::from_wire(resp.results[2].error_code),
        ErrorCode::InvalidRequest
    );
    assert!(
        resp.results[2].error_message.contains("pattern_type"),
        "{resp:?}"
    );
    assert_eq!(resp.results[3].error_code, 0);
    assert!(resp.results[3].deleted.is_empty());
    assert_eq!(cl.c.image().acls().cloned().collect::<Vec<_>>(), vec![d]);
    cl.assert_replays_and_snapshots();
}

#[test]
fn users_and_acls_snapshot_with_the_users_initialized_mark() {
    let mut cl = Cluster::with_brokers(&[1]);
    commit_alter(&mut cl, &alter(vec![credential("alice", SHA512)], vec![]));
    create(
        &mut cl,
        vec![acl("User:alice", Operation::All, "*", PatternType::Literal).to_pb()],
    );
    let snapshot = cl.c.image().to_snapshot();
    assert!(snapshot.users_initialized);
    let security = snapshot.security.clone().unwrap();
    assert_eq!(security, cl.c.image().security_image());
    assert_eq!(security.credentials, vec![credential("alice", SHA512)]);
    assert_eq!(security.acls.len(), 1);
    cl.assert_replays_and_snapshots();
    // A snapshot from before users existed has no security image: none, uninitialized.
    let mut old = snapshot;
    old.security = None;
    old.users_initialized = false;
    let image = MetadataImage::from_snapshot(&old).unwrap();
    assert_eq!(image.scram_credentials().count(), 0);
    assert!(!image.users_initialized());
}
