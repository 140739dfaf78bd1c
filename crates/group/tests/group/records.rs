//! The persisted records: keys name what they replace, values round-trip, and
//! anything else is an error, never a panic.

use bytes::Bytes;
use proptest::prelude::*;
use syncline_group::*;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z0-9._-]{1,12}", any::<String>()]
}

fn bytes() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

fn member() -> impl Strategy<Value = MemberValue> {
    (
        text(),
        proptest::option::of(text()),
        text(),
        text(),
        any::<i32>(),
        any::<i32>(),
        bytes(),
        bytes(),
    )
        .prop_map(
            |(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                subscription,
                assignment,
            )| {
                MemberValue {
                    member_id,
                    group_instance_id,
                    client_id,
                    client_host,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    subscription,
                    assignment,
                }
            },
        )
}

fn record() -> impl Strategy<Value = Record> {
    let offset_value = (any::<i64>(), any::<i32>(), text(), any::<i64>()).prop_map(
        |(offset, leader_epoch, metadata, commit_timestamp_ms)| OffsetValue {
            offset,
            leader_epoch,
            metadata,
            commit_timestamp_ms,
        },
    );
    let group_value = (
        text(),
        any::<i32>(),
        proptest::option::of(text()),
        proptest::option::of(text()),
        any::<i64>(),
        proptest::collection::vec(member(), 0..4),
    )
        .prop_map(
            |(protocol_type, generation_id, protocol_name, leader, state_timestamp_ms, members)| {
                GroupValue {
                    protocol_type,
                    generation_id,
                    protocol_name,
                    leader,
                    state_timestamp_ms,
                    members,
                }
            },
        );
    prop_oneof![
        (
            text(),
            text(),
            any::<i32>(),
            proptest::option::of(offset_value)
        )
            .prop_map(|(group_id, topic, partition, value)| Record::Offset {
                group_id,
                topic,
                partition,
                value
            }),
        (text(), proptest::option::of(group_value))
            .prop_map(|(group_id, value)| Record::Group { group_id, value }),
    ]
}

proptest! {
    #[test]
    fn every_record_reads_back_as_written(r in record()) {
        let (key, value) = (r.key(), r.value());
        prop_assert_eq!(Record::decode(&key, value.as_deref()), Ok(r));
    }

    #[test]
    fn garbage_is_an_error_or_a_record_never_a_panic(
        key in proptest::collection::vec(any::<u8>(), 0..64),
        value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
    ) {
        let _ = Record::decode(&key, value.as_deref());
    }

    #[test]
    fn a_garbage_value_under_a_valid_key_is_an_error_or_a_record_never_a_panic(
        r in record(),
        tail in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut value = match r.value() {
            Some(v) => v[..2].to_vec(),
            None => vec![0, 0],
        };
        value.extend(tail);
        let _ = Record::decode(&r.key(), Some(&value));
    }
}

#[test]
fn a_key_names_what_its_record_replaces() {
    let offset =
        |group: &str, topic: &str, partition: i32, value: Option<OffsetValue>| Record::Offset {
            group_id: group.into(),
            topic: topic.into(),
            partition,
            value,
        };
    let committed = offset(
        "g",
        "t",
        0,
        Some(OffsetValue {
            offset: 3,
            ..OffsetValue::default()
        }),
    );
    let tombstone = offset("g", "t", 0, None);
    assert_eq!(committed.key(), tombstone.key());
    assert_eq!(tombstone.value(), None);
    assert_eq!(Record::decode(&tombstone.key(), None), Ok(tombstone));
    for other in [
        offset("g", "t", 1, None),
        offset("g", "u", 0, None),
        offset("h", "t", 0, None),
    ] {
        assert_ne!(committed.key(), other.key(), "{other:?}");
    }
    let group = Record::Group {
        group_id: "g".into(),
        value: None,
    };
    assert_ne!(group.key(), committed.key());
    assert_eq!(&group.key()[..2], &GROUP_KEY_VERSION.to_be_bytes());
    assert_eq!(&committed.key()[..2], &OFFSET_KEY_VERSION.to_be_bytes());
    assert_eq!(group.group_id(), "g");
}

/// What, key, value, the error.
type Case<'a> = (&'a str, &'a [u8], Option<&'a [u8]>, DecodeError);

#[test]
fn unreadable_records_say_why() {
    let offset_key = Record::Offset {
        group_id: "g".into(),
        topic: "t".into(),
        partition: 0,
        value: None,
    }
    .key();
    let group_key = Record::Group {
        group_id: "g".into(),
        value: None,
    }
    .key();
    #[rustfmt::skip]
    let cases: &[Case<'_>] = &[
        ("an empty key",                 &[],           None,                  DecodeError::Truncated),
        ("half a version",               &[0],          None,                  DecodeError::Truncated),
        ("a key version from the future", &[0, 9],      None,                  DecodeError::UnknownKeyVersion(9)),
        ("a negative key version",       &[0xff, 0xff], None,                  DecodeError::UnknownKeyVersion(-1)),
        ("an empty value",               &offset_key,   Some(&[]),             DecodeError::Truncated),
        ("an offset value from the future", &offset_key, Some(&[0, 1, 8, 1]),  DecodeError::UnknownValueVersion { kind: "offset", version: 1 }),
        ("a group value from the future", &group_key,   Some(&[0, 7]),         DecodeError::UnknownValueVersion { kind: "group", version: 7 }),
    ];
    for (what, key, value, expected) in cases {
        assert_eq!(
            Record::decode(key, *value).as_ref(),
            Err(expected),
            "{what}"
        );
    }
    // A truncated protobuf body.
    assert!(matches!(
        Record::decode(&[0, 1, 0x0a, 0x05, b'g'], None),
        Err(DecodeError::Malformed(_))
    ));
    assert!(matches!(
        Record::decode(&group_key, Some(&[0, 0, 0x32, 0x7f])),
        Err(DecodeError::Malformed(_))
    ));
}
