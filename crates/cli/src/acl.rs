//! `syncline acl add|remove|list`: ACLs with the flags of Kafka's `kafka-acls`
//! (`--allow-principal`, `--deny-principal`, `--operation`, `--topic`, `--group`,
//! `--cluster`, `--resource-pattern-type`, `--principal`).
//!
//! `add` makes one ACL per principal, operation and resource given. `remove`
//! removes the ACLs that match: a flag left out matches anything (no principal:
//! every principal; no operation: every operation), on the resources named.

use anyhow::{anyhow, bail, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use syncline_auth::acl::{
    AclBinding, AclFilter, Operation, PatternFilter, PatternType, Permission, ResourceType,
    CLUSTER_RESOURCE_NAME, WILDCARD,
};
use syncline_client::{Admin, ClientConfig};

use crate::errors::{explain, Ctx};
use crate::output::Table;

#[derive(Debug, Subcommand)]
pub(crate) enum AclCommand {
    /// Add ACLs: every principal gets every operation on every resource named.
    Add(ChangeArgs),
    /// Remove the ACLs that match (left-out flags match anything).
    Remove(ChangeArgs),
    /// List ACLs, optionally only a principal's or a resource's.
    List(ListArgs),
}

/// The resources a command names.
#[derive(Debug, Args)]
pub(crate) struct ResourceArgs {
    /// A topic (repeatable; `*` is every topic).
    #[arg(long = "topic", value_name = "TOPIC")]
    pub(crate) topics: Vec<String>,
    /// A consumer group (repeatable; `*` is every group).
    #[arg(long = "group", value_name = "GROUP")]
    pub(crate) groups: Vec<String>,
    /// The cluster (for Create, Alter, Describe, ClusterAction,
    /// DescribeConfigs, AlterConfigs, IdempotentWrite).
    #[arg(long)]
    pub(crate) cluster: bool,
}

impl ResourceArgs {
    fn resources(&self) -> Vec<(ResourceType, String)> {
        let topics = self.topics.iter().map(|t| (ResourceType::Topic, t.clone()));
        let groups = self.groups.iter().map(|g| (ResourceType::Group, g.clone()));
        let cluster = self
            .cluster
            .then(|| (ResourceType::Cluster, CLUSTER_RESOURCE_NAME.to_string()));
        topics.chain(groups).chain(cluster).collect()
    }
}

#[derive(Debug, Args)]
pub(crate) struct ChangeArgs {
    /// A principal the ACLs allow, User:NAME or User:* (repeatable).
    #[arg(long = "allow-principal", value_name = "PRINCIPAL")]
    pub(crate) allow_principals: Vec<String>,
    /// A principal the ACLs deny, User:NAME or User:* (repeatable).
    #[arg(long = "deny-principal", value_name = "PRINCIPAL")]
    pub(crate) deny_principals: Vec<String>,
    /// An operation: All, Read, Write, Create, Delete, Alter, Describe,
    /// ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite (repeatable).
    #[arg(long = "operation", value_name = "OPERATION", value_parser = parse_operation)]
    pub(crate) operations: Vec<Operation>,
    #[command(flatten)]
    pub(crate) resources: ResourceArgs,
    /// How resource names match: literal (the name, or * for all) or prefixed
    /// (every name starting with it); remove also takes any.
    #[arg(long, value_name = "TYPE", value_parser = parse_pattern, default_value = "literal")]
    pub(crate) resource_pattern_type: PatternFilter,
    /// The client address the ACLs apply to: * (any; the default for add) or an
    /// IP address.
    #[arg(long, value_name = "HOST")]
    pub(crate) host: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only this principal's ACLs, User:NAME or User:* (exactly).
    #[arg(long, value_name = "PRINCIPAL")]
    pub(crate) principal: Option<String>,
    #[command(flatten)]
    pub(crate) resources: ResourceArgs,
    /// any (every ACL on the names given), match (the ACLs that apply to them:
    /// literal, * and prefixed), literal or prefixed.
    #[arg(long, value_name = "TYPE", value_parser = parse_pattern, default_value = "any")]
    pub(crate) resource_pattern_type: PatternFilter,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

fn parse_operation(s: &str) -> Result<Operation, String> {
    Operation::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Operation::ALL.iter().map(|o| o.name()).collect();
        format!("unknown operation {s:?}: use one of {}", names.join(", "))
    })
}

fn parse_pattern(s: &str) -> Result<PatternFilter, String> {
    match s.to_ascii_lowercase().as_str() {
        "literal" => Ok(PatternFilter::Literal),
        "prefixed" => Ok(PatternFilter::Prefixed),
        "any" => Ok(PatternFilter::Any),
        "match" => Ok(PatternFilter::Match),
        _ => Err(format!(
            "unknown resource pattern type {s:?}: use literal, prefixed, any or match"
        )),
    }
}

/// The principals of `add`/`remove`, with the permission each gets.
fn principals(args: &ChangeArgs) -> Vec<(String, Permission)> {
    let allow = args
        .allow_principals
        .iter()
        .map(|p| (p.clone(), Permission::Allow));
    let deny = args
        .deny_principals
        .iter()
        .map(|p| (p.clone(), Permission::Deny));
    allow.chain(deny).collect()
}

/// The ACLs `add` makes, each checked as the controller will check it.
fn bindings(args: &ChangeArgs) -> Result<Vec<AclBinding>> {
    let pattern_type = match args.resource_pattern_type {
        PatternFilter::Literal => PatternType::Literal,
        PatternFilter::Prefixed => PatternType::Prefixed,
        PatternFilter::Any | PatternFilter::Match => {
            bail!("acl add needs --resource-pattern-type literal or prefixed")
        }
    };
    let principals = principals(args);
    if principals.is_empty() {
        bail!(
            "name who the ACLs are for: --allow-principal User:NAME or --deny-principal User:NAME"
        );
    }
    if args.operations.is_empty() {
        bail!("name the operations: --operation Read (repeatable; see --help for the list)");
    }
    let resources = args.resources.resources();
    if resources.is_empty() {
        bail!("name the resources: --topic TOPIC, --group GROUP or --cluster");
    }
    let host = args.host.clone().unwrap_or_else(|| WILDCARD.to_string());
    let mut out = Vec::new();
    for (principal, permission) in &principals {
        for operation in &args.operations {
            for (resource_type, name) in &resources {
                let binding = AclBinding {
                    resource_type: *resource_type,
                    resource_name: name.clone(),
                    pattern_type,
                    principal: principal.clone(),
                    host: host.clone(),
                    operation: *operation,
                    permission: *permission,
                };
                // Checked (and its host made canonical) as the controller will.
                let checked = AclBinding::from_pb(&binding.to_pb())
                    .map_err(|e| anyhow!("invalid ACL: {e}"))?;
                out.push(checked);
            }
        }
    }
    Ok(out)
}

/// The filters `remove` deletes by: per resource, principal and operation given
/// (any when left out).
fn removal_filters(args: &ChangeArgs) -> Result<Vec<AclFilter>> {
    let resources = args.resources.resources();
    if resources.is_empty() {
        bail!("name the resources: --topic TOPIC, --group GROUP or --cluster");
    }
    if args.resource_pattern_type == PatternFilter::Match {
        bail!("acl remove takes --resource-pattern-type literal, prefixed or any");
    }
    let principals: Vec<(Option<String>, Option<Permission>)> = {
        let given = principals(args);
        if given.is_empty() {
            vec![(None, None)]
        } else {
            given
                .into_iter()
                .map(|(p, perm)| (Some(p), Some(perm)))
                .collect()
        }
    };
    let operations: Vec<Option<Operation>> = if args.operations.is_empty() {
        vec![None]
    } else {
        args.operations.iter().copied().map(Some).collect()
    };
    let mut out = Vec::new();
    for (principal, permission) in &principals {
        for operation in &operations {
            for (resource_type, name) in &resources {
                let filter = AclFilter {
                    resource_type: Some(*resource_type),
                    resource_name: Some(name.clone()),
                    pattern: args.resource_pattern_type,
                    principal: principal.clone(),
                    host: args.host.clone(),
                    operation: *operation,
                    permission: *permission,
                };
                let checked = AclFilter::from_pb(&filter.to_pb())
                    .map_err(|e| anyhow!("invalid ACL filter: {e}"))?;
                out.push(checked);
            }
        }
    }
    Ok(out)
}

/// The filters `list` describes with: one per resource named, or one for all.
fn list_filters(args: &ListArgs) -> Result<Vec<AclFilter>> {
    let resources: Vec<(Option<ResourceType>, Option<String>)> = {
        let named = args.resources.resources();
        if named.is_empty() {
            vec![(None, None)]
        } else {
            named.into_iter().map(|(t, n)| (Some(t), Some(n))).collect()
        }
    };
    resources
        .into_iter()
        .map(|(resource_type, resource_name)| {
            let filter = AclFilter {
                resource_type,
                resource_name,
                pattern: args.resource_pattern_type,
                principal: args.principal.clone(),
                ..AclFilter::any()
            };
            AclFilter::from_pb(&filter.to_pb()).map_err(|e| anyhow!("invalid ACL filter: {e}"))
        })
        .collect()
}

pub(crate) async fn run(command: AclCommand, config: ClientConfig) -> Result<()> {
    let bootstrap = config.bootstrap_servers.join(",");
    let ctx = Ctx {
        bootstrap: &bootstrap,
        topic: None,
    };
    let fail = |e: syncline_client::ClientError| anyhow!(explain(&e, ctx));
    // Arguments first: a mistake is reported without a round trip.
    match command {
        AclCommand::Add(args) => {
            let acls = bindings(&args)?;
            let admin = Admin::new(config).map_err(fail)?;
            let results = admin.create_acls(&acls).await.map_err(fail)?;
            for (acl, r) in acls.iter().zip(&results) {
                if let Some(code) = r.error {
                    bail!("{acl}: {code}: {}", r.message);
                }
            }
            println!("Added ACLs:");
            for acl in &acls {
                println!("  {acl}");
            }
        }
        AclCommand::Remove(args) => {
            let filters = removal_filters(&args)?;
            let admin = Admin::new(config).map_err(fail)?;
            let results = admin.delete_acls(&filters).await.map_err(fail)?;
            let mut removed: Vec<AclBinding> = Vec::new();
            for r in &results {
                if let Some(code) = r.error {
                    bail!("{code}: {}", r.message);
                }
                removed.extend(r.deleted.iter().cloned());
            }
            removed.sort();
            removed.dedup();
            if removed.is_empty() {
                println!("No ACL matched: nothing removed (`syncline acl list` shows them)");
            } else {
                println!("Removed ACLs:");
                for acl in &removed {
                    println!("  {acl}");
                }
            }
        }
        AclCommand::List(args) => {
            let filters = list_filters(&args)?;
            let admin = Admin::new(config).map_err(fail)?;
            let mut acls = Vec::new();
            for f in &filters {
                acls.extend(admin.describe_acls(f).await.map_err(fail)?);
            }
            acls.sort();
            acls.dedup();
            if args.json {
                println!("{}", serde_json::to_string_pretty(&list_json(&acls))?);
            } else {
                print!("{}", list_table(&acls));
            }
        }
    }
    Ok(())
}

fn list_table(acls: &[AclBinding]) -> String {
    let mut table = Table::new(&[
        "PRINCIPAL",
        "PERMISSION",
        "OPERATION",
        "HOST",
        "RESOURCE_TYPE",
        "PATTERN_TYPE",
        "RESOURCE",
    ]);
    for a in acls {
        table.row(vec![
            a.principal.clone(),
            a.permission.name().to_string(),
            a.operation.name().to_string(),
            a.host.clone(),
            a.resource_type.name().to_string(),
            a.pattern_type.name().to_string(),
            a.resource_name.clone(),
        ]);
    }
    table.render()
}

fn list_json(acls: &[AclBinding]) -> Value {
    acls.iter()
        .map(|a| {
            json!({
                "principal": a.principal,
                "permission": a.permission.name(),
                "operation": a.operation.name(),
                "host": a.host,
                "resource_type": a.resource_type.name(),
                "pattern_type": a.pattern_type.name(),
                "resource_name": a.resource_name,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {

    use super::*;

    fn parse(args: &[&str]) -> Result<AclCommand, clap::Error> {
        crate::args::parse_subcommand("acl", args)
    }

    fn change(args: &[&str]) -> ChangeArgs {
        match parse(args).unwrap() {
            AclCommand::Add(a) | AclCommand::Remove(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn add_makes_one_acl_per_principal_operation_and_resource() {
        let args = change(&[
            "add",
            "--allow-principal",
            "User:alice",
            "--deny-principal",
            "User:bob",
            "--operation",
            "Read",
            "--operation",
            "describe",
            "--topic",
            "orders",
            "--group",
            "billing",
            "--host",
            "::ffff:10.0.0.1",
        ]);
        let acls = bindings(&args).unwrap();
        assert_eq!(acls.len(), 2 * 2 * 2);
        let first = &acls[0];
        assert_eq!(
            (first.principal.as_str(), first.permission, first.operation),
            ("User:alice", Permission::Allow, Operation::Read)
        );
        assert_eq!(first.resource_type, ResourceType::Topic);
        assert!(acls.iter().any(|a| a.permission == Permission::Deny
            && a.resource_type == ResourceType::Group
            && a.resource_name == "billing"));
        assert!(acls.iter().all(|a| a.pattern_type == PatternType::Literal));
        assert_eq!(
            first.to_string(),
            format!(
                "User:alice has Allow permission for operation Read on Topic:LITERAL:orders from host {}",
                first.host
            )
        );

        let prefixed = bindings(&change(&[
            "add",
            "--allow-principal",
            "User:*",
            "--operation",
            "IdempotentWrite",
            "--cluster",
            "--resource-pattern-type",
            "literal",
        ]))
        .unwrap();
        assert_eq!(prefixed[0].resource_name, "kafka-cluster");
        assert_eq!(prefixed[0].host, "*");
    }

    #[test]
    fn add_refuses_what_the_controller_would_with_the_reason() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["add", "--operation", "Read", "--topic", "t"],
                "--allow-principal",
            ),
            (
                &["add", "--allow-principal", "User:a", "--topic", "t"],
                "--operation",
            ),
            (
                &["add", "--allow-principal", "User:a", "--operation", "Read"],
                "--topic",
            ),
            (
                &[
                    "add",
                    "--allow-principal",
                    "alice",
                    "--operation",
                    "Read",
                    "--topic",
                    "t",
                ],
                "User:NAME",
            ),
            (
                &[
                    "add",
                    "--allow-principal",
                    "User:a",
                    "--operation",
                    "Write",
                    "--group",
                    "g",
                ],
                "not valid for",
            ),
            (
                &[
                    "add",
                    "--allow-principal",
                    "User:a",
                    "--operation",
                    "Read",
                    "--topic",
                    "t",
                    "--host",
                    "example.com",
                ],
                "IP",
            ),
            (
                &[
                    "add",
                    "--allow-principal",
                    "User:a",
                    "--operation",
                    "Read",
                    "--topic",
                    "t",
                    "--resource-pattern-type",
                    "match",
                ],
                "literal or prefixed",
            ),
        ];
        for (args, words) in cases {
            let e = bindings(&change(args)).unwrap_err().to_string();
            assert!(e.contains(words), "{args:?}: {e}");
        }
        let e = parse(&["add", "--operation", "Fly"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("Read, Write"), "{e}");
        let e = parse(&["add", "--resource-pattern-type", "glob"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("literal, prefixed, any or match"), "{e}");
    }

    #[test]
    fn remove_matches_anything_left_out_on_the_resources_named() {
        let filters = removal_filters(&change(&["remove", "--topic", "orders"])).unwrap();
        assert_eq!(filters.len(), 1);
        let f = &filters[0];
        assert_eq!(f.resource_type, Some(ResourceType::Topic));
        assert_eq!(f.resource_name.as_deref(), Some("orders"));
        assert_eq!(f.pattern, PatternFilter::Literal);
        assert_eq!((&f.principal, f.operation, &f.host), (&None, None, &None));
        let filters = removal_filters(&change(&[
            "remove",
            "--deny-principal",
            "User:bob",
            "--operation",
            "Write",
            "--topic",
            "a",
            "--topic",
            "b",
            "--resource-pattern-type",
            "any",
        ]))
        .unwrap();
        assert_eq!(filters.len(), 2);
        assert_eq!(filters[1].permission, Some(Permission::Deny));
        assert_eq!(filters[1].pattern, PatternFilter::Any);
        assert!(
            removal_filters(&change(&["remove", "--allow-principal", "User:a"]))
                .unwrap_err()
                .to_string()
                .contains("--topic")
        );
    }

    #[test]
    fn list_filters_default_to_every_acl() {
        let AclCommand::List(args) = parse(&["list"]).unwrap() else {
            panic!()
        };
        assert_eq!(list_filters(&args).unwrap(), vec![AclFilter::any()]);
        let AclCommand::List(args) = parse(&[
            "list",
            "--principal",
            "User:alice",
            "--topic",
            "orders",
            "--resource-pattern-type",
            "match",
            "--json",
        ])
        .unwrap() else {
            panic!()
        };
        let f = &list_filters(&args).unwrap()[0];
        assert_eq!(f.pattern, PatternFilter::Match);
        assert_eq!(f.principal.as_deref(), Some("User:alice"));
        assert!(args.json);
        let acl = AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: "orders".into(),
            pattern_type: PatternType::Prefixed,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: Operation::Read,
            permission: Permission::Allow,
        };
        let table = list_table(std::slice::from_ref(&acl));
        assert!(
            table
                .lines()
                .nth(1)
                .unwrap()
                .starts_with("User:alice  Allow"),
            "{table}"
        );
        assert_eq!(
            list_json(&[acl])[0]["pattern_type"],
            PatternType::Prefixed.name()
        );
    }
}
