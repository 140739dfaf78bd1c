//! Requests that name topics, groups or config resources are answered once
//! per name, as Kafka's brokers answer them (it collapses a request's names
//! into a set): a name repeated in a request would otherwise cost its whole
//! answer again for a few bytes of the request each time. Run on every
//! request before it is authorized, so that each later step (the ACL check,
//! auto-creation, building the answer) sees each name once.

use std::collections::HashSet;

use syncline_proto::pb;

/// Collapses the repeated names of `body`, keeping the first of each in its
/// place: Metadata's and DescribeTopics' topics, DescribeGroups' groups, and
/// DescribeConfigs' resources (the keys asked of a resource named twice are
/// merged; all of them when either asks for all).
pub(crate) fn collapse_repeated_names(body: &mut pb::request::Body) {
    use pb::request::Body;
    match body {
        Body::Metadata(r) => first_of_each(&mut r.topics),
        Body::DescribeTopics(r) => first_of_each(&mut r.topics),
        Body::DescribeGroups(r) => first_of_each(&mut r.group_ids),
        Body::DescribeConfigs(r) => merge_resources(&mut r.resources),
        _ => {}
    }
}

/// Keeps the first of each name, in order.
fn first_of_each(names: &mut Vec<String>) {
    if names.len() < 2 {
        return;
    }
    let mut seen = HashSet::with_capacity(names.len());
    names.retain(|n| seen.insert(n.clone()));
}

/// One resource per (type, name), its keys merged: no keys asks for every
/// key, so it wins.
fn merge_resources(resources: &mut Vec<pb::ConfigResource>) {
    if resources.len() < 2 {
        return;
    }
    let mut at = std::collections::HashMap::with_capacity(resources.len());
    let mut merged: Vec<pb::ConfigResource> = Vec::with_capacity(resources.len());
    for r in resources.drain(..) {
        match at.get(&(r.resource_type, r.resource_name.clone())) {
            None => {
                at.insert((r.resource_type, r.resource_name.clone()), merged.len());
                merged.push(r);
            }
            Some(&i) => {
                let kept: &mut pb::ConfigResource = &mut merged[i];
                if kept.keys.is_empty() || r.keys.is_empty() {
                    kept.keys.clear();
                } else {
                    kept.keys.extend(r.keys);
                }
            }
        }
    }
    for r in &mut merged {
        first_of_each(&mut r.keys);
    }
    *resources = merged;
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::request::Body;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_name_is_kept_once_in_its_first_place() {
        let mut m = Body::Metadata(pb::MetadataRequest {
            topics: names(&["b", "a", "b", "b", "c", "a"]),
            allow_auto_topic_creation: true,
            no_topics: false,
        });
        collapse_repeated_names(&mut m);
        let Body::Metadata(m) = m else { unreachable!() };
        assert_eq!(m.topics, names(&["b", "a", "c"]));
        assert!(m.allow_auto_topic_creation);

        let mut d = Body::DescribeTopics(pb::DescribeTopicsRequest {
            topics: names(&["t"; 1000]),
        });
        collapse_repeated_names(&mut d);
        let Body::DescribeTopics(d) = d else {
            unreachable!()
        };
        assert_eq!(d.topics, names(&["t"]));

        let mut g = Body::DescribeGroups(pb::DescribeGroupsRequest {
            group_ids: names(&["g", "h", "g"]),
        });
        collapse_repeated_names(&mut g);
        let Body::DescribeGroups(g) = g else {
            unreachable!()
        };
        assert_eq!(g.group_ids, names(&["g", "h"]));
    }

    #[test]
    fn a_resource_named_twice_is_asked_once_for_the_keys_of_both() {
        let resource = |kind, name: &str, keys: &[&str]| pb::ConfigResource {
            resource_type: kind,
            resource_name: name.to_string(),
            keys: names(keys),
        };
        let mut c = Body::DescribeConfigs(pb::DescribeConfigsRequest {
            resources: vec![
                resource(2, "t", &["retention.ms"]),
                resource(4, "t", &[]),
                resource(2, "t", &["cleanup.policy", "retention.ms"]),
                resource(2, "u", &["a"]),
                resource(2, "u", &[]),
                resource(2, "u", &["b"]),
            ],
        });
        collapse_repeated_names(&mut c);
        let Body::DescribeConfigs(c) = c else {
            unreachable!()
        };
        assert_eq!(
            c.resources,
            vec![
                resource(2, "t", &["retention.ms", "cleanup.policy"]),
                resource(4, "t", &[]),
                resource(2, "u", &[]),
            ]
        );
    }
}
