//! DeleteTopics: the record, the refusals, and a topic of the same name again.

use syncline_controller::{deleted_topics, MetadataImage};
use syncline_proto::{pb, ErrorCode, TopicPartition};

use crate::support::Cluster;

fn delete(cl: &mut Cluster, names: &[&str]) -> (Vec<(String, ErrorCode)>, Vec<pb::MetadataRecord>) {
    let r = cl.c.delete_topics(&pb::DeleteTopicsRequest {
        topics: names.iter().map(|n| n.to_string()).collect(),
        forwarded: false,
    });
    let records = r.records.clone();
    let resp = cl.commit(r);
    assert_eq!(resp.error_code, 0);
    let results = resp
        .topics
        .into_iter()
        .map(|t| (t.name, ErrorCode::from_wire(t.error_code)))
        .collect();
    (results, records)
}

#[test]
fn a_deleted_topic_is_gone_and_its_name_comes_back_with_another_topic_id() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create("t", 2, 3);
    cl.create("u", 1, 3);
    let old_id = cl.c.image().topic("t").unwrap().topic_id;
    let (results, records) = delete(&mut cl, &["t"]);
    assert_eq!(results, vec![("t".to_string(), ErrorCode::None)]);
    assert_eq!(
        deleted_topics(&records),
        vec![pb::DeletedTopic {
            name: "t".into(),
            topic_id: old_id
        }]
    );
    assert!(cl.c.image().topic("t").is_none());
    assert_eq!(cl.c.image().partition_count(), 1, "u stays");
    assert!(cl
        .c
        .image()
        .partition_states()
        .iter()
        .all(|s| s.topic == "u"));

    cl.create("t", 1, 3);
    let new = cl.c.image().topic("t").unwrap();
    assert_ne!(new.topic_id, old_id);
    let state =
        cl.c.image()
            .partition_state(&TopicPartition::new("t", 0))
            .unwrap();
    assert_eq!(state.topic_id, new.topic_id);
    assert_eq!((state.leader_epoch, state.partition_epoch), (0, 0));

    // Replay and snapshot give the same image, topic ids included.
    assert_eq!(&cl.replayed(), cl.c.image());
    let snapshot = cl.c.image().to_snapshot();
    assert_eq!(
        &MetadataImage::from_snapshot(&snapshot).unwrap(),
        cl.c.image()
    );
}

#[test]
fn unknown_and_repeated_names_are_refused_and_the_others_deleted() {
    let mut cl = Cluster::with_brokers(&[1, 2, 3]);
    cl.create("t", 1, 3);
    cl.create("u", 1, 3);
    let (results, records) = delete(&mut cl, &["nope", "t", "u", "u"]);
    assert_eq!(
        results,
        vec![
            ("nope".to_string(), ErrorCode::UnknownTopicOrPartition),
            ("t".to_string(), ErrorCode::None),
            ("u".to_string(), ErrorCode::InvalidRequest),
            ("u".to_string(), ErrorCode::InvalidRequest),
        ]
    );
    assert_eq!(records.len(), 1);
    assert!(cl.c.image().topic("u").is_some());
}
