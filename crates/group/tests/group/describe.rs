//! DescribeGroups and ListGroups.

use bytes::Bytes;
use syncline_group::error::*;
use syncline_group::*;

use crate::support::*;

#[test]
fn describe_shows_metadata_and_assignments_only_once_stable() {
    let mut h = Harness::delayed();
    let (a, _, _) = h.new_member("a");
    let (b, _, _) = h.new_member("b");
    let _ = h.after_initial_delay();
    let ids = [GROUP.to_owned()];
    let completing = &h.c.describe_groups(&ids)[0];
    assert_eq!(
        (completing.state, completing.protocol_name.as_str()),
        (GroupState::CompletingRebalance, "")
    );
    assert_eq!(completing.protocol_type, "consumer");
    assert!(completing
        .members
        .iter()
        .all(|m| m.metadata.is_empty() && m.assignment.is_empty()));

    let (_, _) = h.sync(sync_req(&b, 1, &[]));
    let (_, fx) = h.sync(sync_req(&a, 1, &[(&a, "pa"), (&b, "pb")]));
    let _ = h.ack(&fx);
    let stable = &h.c.describe_groups(&ids)[0];
    assert_eq!(
        stable,
        &DescribedGroup {
            error: NONE,
            group_id: GROUP.into(),
            state: GroupState::Stable,
            protocol_type: "consumer".into(),
            protocol_name: "range".into(),
            members: [(&a, "a", "pa"), (&b, "b", "pb")]
                .into_iter()
                .map(|(member_id, client_id, assignment)| DescribedMember {
                    member_id: member_id.clone(),
                    group_instance_id: None,
                    client_id: client_id.into(),
                    client_host: "/10.0.0.1".into(),
                    metadata: Bytes::from_static(b"range-meta"),
                    assignment: Bytes::from(assignment),
                })
                .collect(),
        }
    );
}

#[test]
fn describing_an_unknown_group_reports_it_dead_without_an_error() {
    let h = Harness::delayed();
    let described = h.c.describe_groups(&["nobody".into(), String::new()]);
    for (d, id) in described.iter().zip(["nobody", ""]) {
        assert_eq!(
            (d.error, d.group_id.as_str(), d.state),
            (NONE, id, GroupState::Dead)
        );
        assert!(d.members.is_empty());
    }
}

#[test]
fn list_groups_reports_every_group_with_its_state_and_protocol_type() {
    let mut h = Harness::delayed();
    let _ = h.stable_group(1);
    let (_, fx) = h.commit(CommitRequest {
        group_id: "offsets-only".into(),
        ..commit_req("", -1, vec![offset("t", 0, 1)])
    });
    let _ = h.ack(&fx);
    let id = h.request_id();
    let _ = h.c.join(
        id,
        JoinRequest {
            group_id: "forming".into(),
            require_known_member_id: false,
            ..join_req("")
        },
        h.now,
    );
    let listed: Vec<(String, String, &str)> =
        h.c.list_groups()
            .into_iter()
            .map(|g| (g.group_id, g.protocol_type, g.state.as_str()))
            .collect();
    assert_eq!(
        listed,
        [
            ("forming".into(), "consumer".into(), "PreparingRebalance"),
            ("g".into(), "consumer".into(), "Stable"),
            ("offsets-only".into(), String::new(), "Empty"),
        ]
    );
    assert_eq!(h.c.groups_count(), 3);
}

#[test]
fn group_states_have_kafkas_names() {
    let names: Vec<String> = [
        GroupState::Empty,
        GroupState::PreparingRebalance,
        GroupState::CompletingRebalance,
        GroupState::Stable,
        GroupState::Dead,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(
        names,
        [
            "Empty",
            "PreparingRebalance",
            "CompletingRebalance",
            "Stable",
            "Dead"
        ]
    );
}
