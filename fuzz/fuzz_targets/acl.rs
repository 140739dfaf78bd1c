//! The ACL authorizer fed hostile ACLs, filters and requests.
//!
//! Input (structured, by `arbitrary`): bindings and filters as they arrive in
//! `CreateAcls`/`DeleteAcls` (codes and strings, mostly near the valid ones so
//! that the fuzzer reaches past validation), and requests to authorize against
//! the bindings that validated. Checked: `AclBinding::from_pb` and
//! `AclFilter::from_pb` never panic; what they accept round-trips through
//! `to_pb` (a binding changes only its host's spelling) and is valid; an exact
//! filter selects its binding; a MATCH filter selects exactly the ACLs that
//! apply to its resource; `authorize` and `may_write_some_topic` never panic, a
//! super user is always allowed, a resource no ACL applies to gets the
//! configured default, and a matching DENY always denies.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use std::net::{Ipv4Addr, Ipv6Addr};
use syncline_auth::acl::{
    self, AclBinding, AclFilter, Acls, AuthorizerConfig, Operation, PatternFilter, PatternType,
    Permission, Resource, ResourceType,
};
use syncline_proto::pb;

/// A code: mostly near Kafka's (-2..=13), sometimes any.
#[derive(Debug, Arbitrary)]
enum Code {
    Near(u8),
    Raw(i32),
}

impl Code {
    fn get(&self) -> i32 {
        match self {
            Code::Near(b) => i32::from(b % 16) - 2,
            Code::Raw(c) => *c,
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Name {
    Cluster,
    Wildcard,
    Empty,
    Text(String),
}

impl Name {
    fn get(&self) -> String {
        match self {
            Name::Cluster => acl::CLUSTER_RESOURCE_NAME.to_owned(),
            Name::Wildcard => "*".to_owned(),
            Name::Empty => String::new(),
            Name::Text(s) => s.clone(),
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Principal {
    User(String),
    Everyone,
    Raw(String),
}

impl Principal {
    fn get(&self) -> String {
        match self {
            Principal::User(name) => format!("User:{name}"),
            Principal::Everyone => "User:*".to_owned(),
            Principal::Raw(s) => s.clone(),
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Host {
    Any,
    V4([u8; 4]),
    V6([u16; 8]),
    /// An IPv4 address written as an IPv4-mapped IPv6 one.
    Mapped([u8; 4]),
    Raw(String),
}

impl Host {
    fn get(&self) -> String {
        match self {
            Host::Any => "*".to_owned(),
            Host::V4(a) => Ipv4Addr::from(*a).to_string(),
            Host::V6(a) => Ipv6Addr::from(*a).to_string(),
            Host::Mapped(a) => format!("::ffff:{}", Ipv4Addr::from(*a)),
            Host::Raw(s) => s.clone(),
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Fields {
    resource_type: Code,
    resource_name: Name,
    pattern_type: Code,
    principal: Principal,
    host: Host,
    operation: Code,
    permission_type: Code,
}

impl Fields {
    fn binding(&self) -> pb::AclBinding {
        pb::AclBinding {
            resource_type: self.resource_type.get(),
            resource_name: self.resource_name.get(),
            pattern_type: self.pattern_type.get(),
            principal: self.principal.get(),
            host: self.host.get(),
            operation: self.operation.get(),
            permission_type: self.permission_type.get(),
        }
    }

    fn filter(&self) -> pb::AclBindingFilter {
        let b = self.binding();
        pb::AclBindingFilter {
            resource_type: b.resource_type,
            resource_name: b.resource_name,
            pattern_type: b.pattern_type,
            principal: b.principal,
            host: b.host,
            operation: b.operation,
            permission_type: b.permission_type,
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Query {
    principal: Principal,
    host: Host,
    operation: u8,
    resource_type: u8,
    name: Name,
    super_user: bool,
    allow_everyone: bool,
}

#[derive(Debug, Arbitrary)]
struct Input {
    bindings: Vec<Fields>,
    filters: Vec<Fields>,
    queries: Vec<Query>,
}

fn check_binding(pb: &pb::AclBinding) -> Option<AclBinding> {
    let binding = match AclBinding::from_pb(pb) {
        Ok(b) => b,
        Err(e) => {
            let _ = e.to_string();
            return None;
        }
    };
    let _ = binding.to_string();
    let again = binding.to_pb();
    assert_eq!(
        pb::AclBinding {
            host: pb.host.clone(),
            ..again.clone()
        },
        *pb,
        "to_pb changed more than the host's spelling"
    );
    assert_eq!(
        AclBinding::from_pb(&again).as_ref(),
        Ok(&binding),
        "an accepted binding does not round-trip"
    );
    assert!(binding.operation.valid_for(binding.resource_type));
    assert!(binding.principal.starts_with(acl::USER_PRINCIPAL_PREFIX));
    assert!(!binding.resource_name.is_empty());
    let exact = AclFilter::exact(&binding);
    assert!(
        exact.matches(&binding),
        "an exact filter misses its binding"
    );
    assert_eq!(AclFilter::from_pb(&exact.to_pb()).as_ref(), Ok(&exact));
    assert!(AclFilter::any().matches(&binding));
    Some(binding)
}

fuzz_target!(|input: Input| {
    let bindings: Vec<AclBinding> = input
        .bindings
        .iter()
        .filter_map(|f| check_binding(&f.binding()))
        .collect();
    let acls = Acls::new(bindings.iter().cloned());
    assert!(acls.len() <= bindings.len());
    assert!(bindings.iter().all(|b| acls.contains(b)));

    for fields in &input.filters {
        match AclFilter::from_pb(&fields.filter()) {
            Ok(filter) => {
                assert_eq!(
                    AclFilter::from_pb(&filter.to_pb()).as_ref(),
                    Ok(&filter),
                    "a filter does not round-trip"
                );
                let selected = acls.matching(&filter).count();
                assert_eq!(selected, acls.iter().filter(|b| filter.matches(b)).count());
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }

    for q in &input.queries {
        let principal = q.principal.get();
        let host = q.host.get();
        let op = Operation::ALL[usize::from(q.operation) % Operation::ALL.len()];
        let resource_type =
            ResourceType::ALL[usize::from(q.resource_type) % ResourceType::ALL.len()];
        let name = q.name.get();
        let resource = Resource {
            resource_type,
            name: &name,
        };
        let config = AuthorizerConfig {
            super_users: if q.super_user {
                vec![principal.clone()]
            } else {
                vec![]
            },
            allow_everyone_if_no_acl_found: q.allow_everyone,
        };
        let allowed = acl::authorize(&acls, &config, &principal, &host, op, resource);
        let may_write = acl::may_write_some_topic(&acls, &config, &principal, &host);
        if q.super_user {
            assert!(allowed && may_write, "a super user was refused");
            continue;
        }
        // The ACLs that apply to the resource are those a MATCH filter selects.
        let matching = AclFilter {
            resource_type: Some(resource_type),
            resource_name: Some(name.clone()),
            pattern: PatternFilter::Match,
            ..AclFilter::any()
        };
        let applying = acls.iter().filter(|b| b.applies_to(resource)).count();
        assert_eq!(
            acls.matching(&matching).count(),
            applying,
            "MATCH disagrees with applies_to"
        );
        if applying == 0 {
            assert_eq!(
                allowed, q.allow_everyone,
                "a resource without ACLs did not get the default"
            );
        }
        // A DENY of exactly this request always denies.
        let deny = AclBinding {
            resource_type,
            resource_name: name.clone(),
            pattern_type: PatternType::Literal,
            principal: principal.clone(),
            host: "*".to_owned(),
            operation: op,
            permission: Permission::Deny,
        };
        // So does a DENY of everything on every resource of the type, for everyone.
        let deny_all = AclBinding {
            resource_name: "*".to_owned(),
            principal: "User:*".to_owned(),
            operation: Operation::All,
            ..deny.clone()
        };
        for deny in [deny, deny_all] {
            let denied = Acls::new(acls.iter().cloned().chain([deny]));
            assert!(
                !acl::authorize(&denied, &config, &principal, &host, op, resource),
                "a matching deny did not deny"
            );
        }
    }
});
