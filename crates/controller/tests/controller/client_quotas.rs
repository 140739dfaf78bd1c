//! Client quotas: AlterClientQuotas (named after Kafka's
//! ClientQuotaControlManagerTest), DescribeClientQuotas' filters (after
//! Kafka's ClientQuotasImage / ClientQuotasRequestTest), and their records
//! through replay and snapshots.

use syncline_controller::client_quotas::{
    describe, ClientQuotaEntity, QuotaKey, QuotaName, MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT,
};
use syncline_controller::{client_quotas_changed, MetadataImage};
use syncline_proto::{pb, ErrorCode};

use crate::support::Cluster;

const PRODUCE: &str = "producer_byte_rate";
const CONSUME: &str = "consumer_byte_rate";
const REQUEST: &str = "request_percentage";

fn component(entity_type: &str, name: Option<&str>) -> pb::ClientQuotaEntityComponent {
    pb::ClientQuotaEntityComponent {
        entity_type: entity_type.to_owned(),
        entity_name: name.map(str::to_owned),
    }
}

fn user(name: Option<&str>) -> Vec<pb::ClientQuotaEntityComponent> {
    vec![component("user", name)]
}

fn client(name: Option<&str>) -> Vec<pb::ClientQuotaEntityComponent> {
    vec![component("client-id", name)]
}

fn user_client(u: Option<&str>, c: Option<&str>) -> Vec<pb::ClientQuotaEntityComponent> {
    vec![component("user", u), component("client-id", c)]
}

fn set(key: &str, value: f64) -> pb::ClientQuotaOp {
    pb::ClientQuotaOp {
        key: key.to_owned(),
        value,
        remove: false,
    }
}

fn remove(key: &str) -> pb::ClientQuotaOp {
    pb::ClientQuotaOp {
        key: key.to_owned(),
        value: 0.0,
        remove: true,
    }
}

fn entry(
    entity: Vec<pb::ClientQuotaEntityComponent>,
    ops: Vec<pb::ClientQuotaOp>,
) -> pb::ClientQuotaAlteration {
    pb::ClientQuotaAlteration { entity, ops }
}

fn alter(entries: Vec<pb::ClientQuotaAlteration>) -> pb::AlterClientQuotasRequest {
    pb::AlterClientQuotasRequest {
        entries,
        validate_only: false,
        forwarded: false,
    }
}

/// Commits the request; each entry's code and message.
fn commit_alter(cl: &mut Cluster, req: &pb::AlterClientQuotasRequest) -> Vec<(ErrorCode, String)> {
    let r = cl.c.alter_client_quotas(req);
    let resp = cl.commit(r);
    assert_eq!(resp.error_code, 0, "{resp:?}");
    assert_eq!(resp.results.len(), req.entries.len());
    resp.results
        .into_iter()
        .map(|r| (ErrorCode::from_wire(r.error_code), r.error_message))
        .collect()
}

fn entity(components: &[pb::ClientQuotaEntityComponent]) -> ClientQuotaEntity {
    ClientQuotaEntity::from_pb(components).expect("a valid entity")
}

/// The quotas of an entity in the image, by key name.
fn quotas_of(cl: &Cluster, components: &[pb::ClientQuotaEntityComponent]) -> Vec<(String, f64)> {
    cl.c.image()
        .client_quotas()
        .get(&entity(components))
        .map(|v| v.iter().map(|(k, v)| (k.name().to_owned(), v)).collect())
        .unwrap_or_default()
}

/// An entry refused whole: INVALID_REQUEST with `why` in its message, and no
/// record.
fn assert_invalid(cl: &Cluster, entry: pb::ClientQuotaAlteration, why: &str) {
    let r = cl.c.alter_client_quotas(&alter(vec![entry.clone()]));
    assert!(r.records.is_empty(), "{entry:?}: {:?}", r.records);
    let result = &r.response.results[0];
    assert_eq!(
        ErrorCode::from_wire(result.error_code),
        ErrorCode::InvalidRequest,
        "{entry:?}"
    );
    assert!(
        result.error_message.contains(why),
        "{entry:?}: {:?} does not say {why:?}",
        result.error_message
    );
    assert_eq!(result.entity, entry.entity, "the result names its entity");
}

#[test]
fn test_invalid_entity_types() {
    let cl = Cluster::new();
    let quota = || vec![set(PRODUCE, 10_000.0)];
    for (components, why) in [
        (
            vec![component("foo", Some("bar"))],
            "unhandled client quota entity type",
        ),
        (
            vec![component("", Some("null"))],
            "unhandled client quota entity type",
        ),
        (
            vec![
                component("user", Some("user-1")),
                component("foo", Some("bar")),
            ],
            "unhandled",
        ),
        (
            vec![
                component("foo", Some("bar")),
                component("ip", Some("1.2.3.4")),
            ],
            "unhandled",
        ),
        (
            vec![
                component("user", Some("user-1")),
                component("ip", Some("1.2.3.4")),
            ],
            "ip quotas",
        ),
        (
            vec![
                component("client-id", Some("c")),
                component("ip", Some("1.2.3.4")),
            ],
            "ip quotas",
        ),
        (vec![], "invalid empty client quota entity"),
        (
            vec![component("user", Some("a")), component("user", Some("b"))],
            "duplicate entity entry",
        ),
        (
            vec![component("user", Some(""))],
            "empty user not supported",
        ),
        (
            vec![component("client-id", Some(""))],
            "empty client-id not supported",
        ),
    ] {
        assert_invalid(&cl, entry(components, quota()), why);
    }
}

#[test]
fn test_invalid_quota_keys() {
    let cl = Cluster::new();
    let u = || user(Some("user-1"));
    // Invalid + valid keys, valid + invalid: the entry is refused whole.
    assert_invalid(
        &cl,
        entry(u(), vec![set("not.a.quota.key", 0.0), set(REQUEST, 99.9)]),
        "invalid quota key",
    );
    assert_invalid(
        &cl,
        entry(u(), vec![set(REQUEST, 99.9), set("not.a.quota.key", 0.0)]),
        "invalid quota key",
    );
    assert_invalid(&cl, entry(u(), vec![set("", 99.9)]), "invalid quota key");
    // KIP-599's controller mutation rate is not enforced here: refused, not ignored.
    assert_invalid(
        &cl,
        entry(u(), vec![set("controller_mutation_rate", 10.0)]),
        "invalid quota key",
    );
    assert_invalid(
        &cl,
        entry(u(), vec![remove("not.a.quota.key")]),
        "invalid quota key",
    );
}

#[test]
fn invalid_quota_values_are_refused() {
    let cl = Cluster::new();
    let u = || user(Some("user-1"));
    for (op, why) in [
        (set(PRODUCE, 0.0), "must be greater than 0"),
        (set(CONSUME, -1.0), "must be greater than 0"),
        (set(REQUEST, -0.5), "must be greater than 0"),
        (set(REQUEST, f64::NAN), "must be greater than 0"),
        (set(REQUEST, f64::INFINITY), "must be greater than 0"),
        (set(PRODUCE, 1000.5), "integer value expected"),
        (set(CONSUME, 1e19), "too large for a LONG"),
    ] {
        assert_invalid(&cl, entry(u(), vec![op.clone()]), why);
    }
    assert_invalid(
        &cl,
        entry(u(), vec![set(PRODUCE, 1.0), set(PRODUCE, 2.0)]),
        "changed more than once",
    );
    assert_invalid(
        &cl,
        entry(u(), vec![set(PRODUCE, 1.0), remove(PRODUCE)]),
        "changed more than once",
    );
}

#[test]
fn test_alter_and_remove() {
    let mut cl = Cluster::new();
    let u = || user(Some("user-1"));
    let ok = vec![(ErrorCode::None, String::new())];

    // Add one quota.
    assert_eq!(
        commit_alter(
            &mut cl,
            &alter(vec![entry(u(), vec![set(PRODUCE, 10_000.0)])])
        ),
        ok
    );
    assert_eq!(quotas_of(&cl, &u()), vec![(PRODUCE.into(), 10_000.0)]);

    // Replace it and add another.
    let both = alter(vec![entry(
        u(),
        vec![set(PRODUCE, 10_001.0), set(CONSUME, 20_000.0)],
    )]);
    assert_eq!(commit_alter(&mut cl, &both), ok);
    assert_eq!(
        quotas_of(&cl, &u()),
        vec![(PRODUCE.into(), 10_001.0), (CONSUME.into(), 20_000.0)]
    );

    // Remove one of them, the other remains.
    assert_eq!(
        commit_alter(&mut cl, &alter(vec![entry(u(), vec![remove(PRODUCE)])])),
        ok
    );
    assert_eq!(quotas_of(&cl, &u()), vec![(CONSUME.into(), 20_000.0)]);

    // Remove a quota that is not set: no change, no record.
    let r =
        cl.c.alter_client_quotas(&alter(vec![entry(u(), vec![remove(REQUEST)])]));
    assert!(r.records.is_empty());
    assert_eq!(cl.commit(r).results[0].error_code, 0);

    // All quotas removed: the entity goes.
    assert_eq!(
        commit_alter(&mut cl, &alter(vec![entry(u(), vec![remove(CONSUME)])])),
        ok
    );
    assert!(cl.c.image().client_quotas().is_empty());

    // Remove again: still no change.
    let r =
        cl.c.alter_client_quotas(&alter(vec![entry(u(), vec![remove(CONSUME)])]));
    assert!(r.records.is_empty());
    let _ = cl.commit(r);

    // A mixed update.
    let mixed = alter(vec![entry(
        u(),
        vec![
            set(REQUEST, 99.0),
            set(PRODUCE, 10_002.0),
            set(CONSUME, 20_001.0),
        ],
    )]);
    assert_eq!(commit_alter(&mut cl, &mixed), ok);
    assert_eq!(
        quotas_of(&cl, &u()),
        vec![
            (PRODUCE.into(), 10_002.0),
            (CONSUME.into(), 20_001.0),
            (REQUEST.into(), 99.0)
        ]
    );
    // The same values again: no record.
    assert!(cl.c.alter_client_quotas(&mixed).records.is_empty());
    cl.assert_replays_and_snapshots();
}

/// Kafka's testEntityTypes: every combination of user and client id, each
/// named or default, is an entity of its own, with a record each.
#[test]
fn test_entity_types() {
    let mut cl = Cluster::new();
    let entities = [
        user_client(Some("user-1"), Some("client-id-1")),
        user_client(Some("user-2"), Some("client-id-1")),
        user_client(Some("user-3"), Some("client-id-2")),
        user_client(None, Some("client-id-1")),
        user_client(Some("user-1"), None),
        user_client(None, None),
        user(Some("user-1")),
        user(None),
        client(Some("client-id-2")),
        client(None),
    ];
    let req = alter(
        entities
            .iter()
            .zip(0..)
            .map(|(e, i)| entry(e.clone(), vec![set(REQUEST, 50.5 + f64::from(i))]))
            .collect(),
    );
    let r = cl.c.alter_client_quotas(&req);
    assert!(client_quotas_changed(&r.records));
    let records: Vec<pb::ClientQuotaRecord> = r
        .records
        .iter()
        .map(|r| match &r.record {
            Some(pb::metadata_record::Record::ClientQuota(q)) => q.clone(),
            other => panic!("not a client quota record: {other:?}"),
        })
        .collect();
    let expected: Vec<pb::ClientQuotaRecord> = entities
        .iter()
        .zip(0..)
        .map(|(e, i)| pb::ClientQuotaRecord {
            entity: e.clone(),
            key: REQUEST.into(),
            value: 50.5 + f64::from(i),
            remove: false,
        })
        .collect();
    assert_eq!(records, expected);
    let _ = cl.commit(r);
    assert_eq!(cl.c.image().client_quotas().len(), entities.len());
    let both_defaults = entity(&user_client(None, None));
    assert_eq!(
        both_defaults,
        ClientQuotaEntity {
            user: Some(QuotaName::Default),
            client_id: Some(QuotaName::Default)
        }
    );
    assert_eq!(
        cl.c.image().client_quotas()[&both_defaults].get(QuotaKey::RequestPercentage),
        Some(55.5)
    );
    cl.assert_replays_and_snapshots();
}

/// Each entry stands alone: a valid entry beside an invalid one is made; an
/// entity named by two entries of one request is refused the second time.
#[test]
fn entries_are_made_or_refused_one_by_one() {
    let mut cl = Cluster::new();
    let req = alter(vec![
        entry(client(Some("good")), vec![set(PRODUCE, 1024.0)]),
        entry(client(Some("bad")), vec![set(PRODUCE, -1.0)]),
        entry(client(Some("good")), vec![set(CONSUME, 1024.0)]),
    ]);
    let results = commit_alter(&mut cl, &req);
    assert_eq!(results[0], (ErrorCode::None, String::new()));
    assert_eq!(results[1].0, ErrorCode::InvalidRequest);
    assert_eq!(results[2].0, ErrorCode::InvalidRequest);
    assert!(
        results[2].1.contains("more than one entry"),
        "{:?}",
        results[2]
    );
    assert_eq!(
        quotas_of(&cl, &client(Some("good"))),
        vec![(PRODUCE.into(), 1024.0)]
    );
    assert!(quotas_of(&cl, &client(Some("bad"))).is_empty());
}

#[test]
fn validate_only_answers_as_an_alteration_would_and_commits_nothing() {
    let cl = Cluster::new();
    let mut req = alter(vec![
        entry(client(Some("c")), vec![set(PRODUCE, 1024.0)]),
        entry(client(Some("c2")), vec![set(PRODUCE, 0.0)]),
    ]);
    req.validate_only = true;
    let r = cl.c.alter_client_quotas(&req);
    assert!(r.records.is_empty());
    let codes: Vec<ErrorCode> = r
        .response
        .results
        .iter()
        .map(|r| ErrorCode::from_wire(r.error_code))
        .collect();
    assert_eq!(codes, vec![ErrorCode::None, ErrorCode::InvalidRequest]);
}

/// Records the image refuses (what the controller never writes): an invalid
/// entity or value, a quota removed that is not there. The image is left as
/// it was.
#[test]
fn the_image_refuses_invalid_client_quota_records() {
    let mut image = MetadataImage::new();
    let record = |entity, key: &str, value, remove| pb::MetadataRecord {
        record: Some(pb::metadata_record::Record::ClientQuota(
            pb::ClientQuotaRecord {
                entity,
                key: key.to_owned(),
                value,
                remove,
            },
        )),
    };
    for bad in [
        record(vec![], PRODUCE, 1.0, false),
        record(client(Some("c")), PRODUCE, 0.0, false),
        record(client(Some("c")), "nope", 1.0, false),
        record(client(Some("c")), PRODUCE, 0.0, true),
    ] {
        let before = image.clone();
        assert!(image.apply(0, &bad).is_err(), "{bad:?}");
        assert_eq!(image, before);
    }
    image
        .apply(0, &record(client(Some("c")), PRODUCE, 1.0, false))
        .unwrap();
    image
        .apply(1, &record(client(Some("c")), PRODUCE, 0.0, true))
        .unwrap();
    assert!(image.client_quotas().is_empty());
}

/// A snapshot whose quotas a replay could not have made is refused.
#[test]
fn a_snapshot_with_invalid_client_quotas_is_refused() {
    let mut snapshot = MetadataImage::new().to_snapshot();
    for entries in [
        vec![pb::ClientQuotaEntry {
            entity: client(Some("c")),
            values: vec![],
        }],
        vec![pb::ClientQuotaEntry {
            entity: client(Some("c")),
            values: vec![pb::ClientQuotaValue {
                key: PRODUCE.into(),
                value: -5.0,
            }],
        }],
        vec![
            pb::ClientQuotaEntry {
                entity: client(Some("c")),
                values: vec![pb::ClientQuotaValue {
                    key: PRODUCE.into(),
                    value: 5.0,
                }],
            };
            2
        ],
    ] {
        snapshot.client_quotas = Some(pb::ClientQuotaImage { entries });
        assert!(
            MetadataImage::from_snapshot(&snapshot).is_err(),
            "{snapshot:?}"
        );
    }
}

/// One side of a described entity: `None` when the entity has no such side,
/// `Some(None)` for its default.
type Side = Option<Option<String>>;

/// The entities a filter selects, as (user, client-id) pairs.
fn described(
    cl: &Cluster,
    components: Vec<pb::ClientQuotaFilterComponent>,
    strict: bool,
) -> Vec<(Side, Side)> {
    let resp = describe(
        cl.c.image().client_quotas(),
        &pb::DescribeClientQuotasRequest { components, strict },
    );
    assert_eq!(resp.error_code, 0, "{resp:?}");
    resp.entries
        .iter()
        .map(|e| {
            let side = |t: &str| {
                e.entity
                    .iter()
                    .find(|c| c.entity_type == t)
                    .map(|c| c.entity_name.clone())
            };
            (side("user"), side("client-id"))
        })
        .collect()
}

fn filter(entity_type: &str, match_type: i32, m: Option<&str>) -> pb::ClientQuotaFilterComponent {
    pb::ClientQuotaFilterComponent {
        entity_type: entity_type.to_owned(),
        match_type,
        r#match: m.map(str::to_owned),
    }
}

/// Kafka's ClientQuotasRequestTest.testClientQuotasFilter, in small: exact,
/// default and any matches, strict and not.
#[test]
fn test_describe_client_quotas_filters() {
    let mut cl = Cluster::new();
    let entities = [
        user(Some("u1")),
        user(None),
        client(Some("c1")),
        client(None),
        user_client(Some("u1"), Some("c1")),
        user_client(Some("u1"), None),
        user_client(None, Some("c1")),
        user_client(None, None),
    ];
    let req = alter(
        entities
            .iter()
            .map(|e| entry(e.clone(), vec![set(PRODUCE, 1000.0)]))
            .collect(),
    );
    let _ = commit_alter(&mut cl, &req);
    let n = |s: &str| Some(Some(s.to_string()));
    let d = Some(None);

    // Everything, not strict; nothing, strict.
    assert_eq!(described(&cl, vec![], false).len(), 8);
    assert!(described(&cl, vec![], true).is_empty());
    // user u1 exactly: alone when strict, with any client-id otherwise.
    assert_eq!(
        described(&cl, vec![filter("user", MATCH_EXACT, Some("u1"))], true),
        vec![(n("u1"), None)]
    );
    assert_eq!(
        described(&cl, vec![filter("user", MATCH_EXACT, Some("u1"))], false),
        vec![(n("u1"), None), (n("u1"), d.clone()), (n("u1"), n("c1"))]
    );
    // The default user, strict.
    assert_eq!(
        described(&cl, vec![filter("user", MATCH_DEFAULT, None)], true),
        vec![(d.clone(), None)]
    );
    // Any client id, strict: the client-id entities alone.
    assert_eq!(
        described(&cl, vec![filter("client-id", MATCH_ANY, None)], true),
        vec![(None, d.clone()), (None, n("c1"))]
    );
    // Any user with the default client id.
    assert_eq!(
        described(
            &cl,
            vec![
                filter("user", MATCH_ANY, None),
                filter("client-id", MATCH_DEFAULT, None)
            ],
            true
        ),
        vec![(d.clone(), d.clone()), (n("u1"), d.clone())]
    );
    // A name nobody has.
    assert!(described(&cl, vec![filter("user", MATCH_EXACT, Some("u2"))], false).is_empty());
}

#[test]
fn invalid_describe_filters_are_refused() {
    let cl = Cluster::new();
    for (components, why) in [
        (vec![filter("", MATCH_ANY, None)], "empty entity type"),
        (
            vec![
                filter("user", MATCH_ANY, None),
                filter("user", MATCH_DEFAULT, None),
            ],
            "more than once",
        ),
        (
            vec![filter("ip", MATCH_ANY, None)],
            "unsupported entity type",
        ),
        (vec![filter("user", MATCH_EXACT, None)], "gives no name"),
        (
            vec![filter("user", MATCH_DEFAULT, Some("u"))],
            "also gives a name",
        ),
        (
            vec![filter("user", MATCH_ANY, Some("u"))],
            "also gives a name",
        ),
        (vec![filter("user", 7, None)], "unknown match type"),
    ] {
        let resp = describe(
            cl.c.image().client_quotas(),
            &pb::DescribeClientQuotasRequest {
                components: components.clone(),
                strict: false,
            },
        );
        assert_eq!(
            ErrorCode::from_wire(resp.error_code),
            ErrorCode::InvalidRequest,
            "{components:?}"
        );
        assert!(
            resp.error_message.contains(why),
            "{resp:?} does not say {why:?}"
        );
    }
}
