//! `syncline quota set|delete|describe`: client quotas (KIP-13, KIP-124,
//! KIP-257), as Kafka's `kafka-configs --entity-type users|clients --alter
//! --add-config producer_byte_rate=...` and `--describe` manage them.
//!
//! An entity is a user, a client id or both, each named or the default
//! (`--default-user`, `--default-client-id`: every user or client id without
//! a quota of its own). Every broker applies the cluster's quotas as the
//! controller announces them.

use anyhow::{anyhow, bail, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};
use syncline_client::{Admin, ClientConfig, ClientQuotaAlterationResult};
use syncline_controller::client_quotas::{
    QuotaKey, CLIENT_ID, MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT, USER,
};
use syncline_proto::pb;

use crate::errors::{explain, Ctx};
use crate::output::Table;

#[derive(Debug, Subcommand)]
pub(crate) enum QuotaCommand {
    /// Set quotas of a user, a client id, or a user's client id (the values
    /// not given are left as they are).
    Set(SetArgs),
    /// Remove quotas of an entity: the ones named, or --all.
    Delete(DeleteArgs),
    /// The quotas set, of every entity or those the filters match.
    Describe(DescribeArgs),
}

/// The entity a change is for: a user, a client id or both.
#[derive(Debug, Args)]
pub(crate) struct EntityArgs {
    /// The user (as it authenticates; ANONYMOUS for clients that do not).
    #[arg(long, value_name = "NAME", conflicts_with = "default_user")]
    pub(crate) user: Option<String>,
    /// Every user without a quota of its own.
    #[arg(long)]
    pub(crate) default_user: bool,
    /// The client id.
    #[arg(long, value_name = "ID", conflicts_with = "default_client_id")]
    pub(crate) client_id: Option<String>,
    /// Every client id without a quota of its own.
    #[arg(long)]
    pub(crate) default_client_id: bool,
}

impl EntityArgs {
    /// Kafka's entity components; an error when neither side is given.
    fn components(&self) -> Result<Vec<pb::ClientQuotaEntityComponent>> {
        let side = |entity_type: &str, name: &Option<String>, default: bool| {
            (name.is_some() || default).then(|| pb::ClientQuotaEntityComponent {
                entity_type: entity_type.to_string(),
                entity_name: name.clone(),
            })
        };
        let components: Vec<_> = [
            side(USER, &self.user, self.default_user),
            side(CLIENT_ID, &self.client_id, self.default_client_id),
        ]
        .into_iter()
        .flatten()
        .collect();
        if components.is_empty() {
            bail!(
                "name the entity: --user NAME or --default-user, and/or --client-id ID or \
                 --default-client-id"
            );
        }
        Ok(components)
    }
}

#[derive(Debug, Args)]
pub(crate) struct SetArgs {
    #[command(flatten)]
    pub(crate) entity: EntityArgs,
    /// Bytes a second the entity may produce.
    #[arg(long, value_name = "BYTES", allow_negative_numbers = true)]
    pub(crate) producer_byte_rate: Option<u64>,
    /// Bytes a second the entity may fetch as a consumer.
    #[arg(long, value_name = "BYTES", allow_negative_numbers = true)]
    pub(crate) consumer_byte_rate: Option<u64>,
    /// Percent of one request handler thread the entity's requests may take
    /// over the quota window.
    #[arg(long, value_name = "PERCENT", allow_negative_numbers = true)]
    pub(crate) request_percentage: Option<f64>,
    /// Check the change only: nothing is set.
    #[arg(long)]
    pub(crate) validate_only: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    #[command(flatten)]
    pub(crate) entity: EntityArgs,
    /// Remove the producer byte rate.
    #[arg(long)]
    pub(crate) producer_byte_rate: bool,
    /// Remove the consumer byte rate.
    #[arg(long)]
    pub(crate) consumer_byte_rate: bool,
    /// Remove the request percentage.
    #[arg(long)]
    pub(crate) request_percentage: bool,
    /// Remove every quota of the entity.
    #[arg(long, conflicts_with_all = ["producer_byte_rate", "consumer_byte_rate", "request_percentage"])]
    pub(crate) all: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DescribeArgs {
    /// Only this user's entities.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["default_user", "any_user"])]
    pub(crate) user: Option<String>,
    /// Only the default user's entities.
    #[arg(long, conflicts_with = "any_user")]
    pub(crate) default_user: bool,
    /// Only entities with a user (named or default).
    #[arg(long)]
    pub(crate) any_user: bool,
    /// Only this client id's entities.
    #[arg(long, value_name = "ID", conflicts_with_all = ["default_client_id", "any_client_id"])]
    pub(crate) client_id: Option<String>,
    /// Only the default client id's entities.
    #[arg(long, conflicts_with = "any_client_id")]
    pub(crate) default_client_id: bool,
    /// Only entities with a client id (named or default).
    #[arg(long)]
    pub(crate) any_client_id: bool,
    /// Only entities with no other side than those filtered (Kafka's strict
    /// match): `--user alice --strict` leaves out alice's client ids.
    #[arg(long)]
    pub(crate) strict: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

impl DescribeArgs {
    fn components(&self) -> Vec<pb::ClientQuotaFilterComponent> {
        let side = |entity_type: &str, name: &Option<String>, default: bool, any: bool| {
            let (match_type, m) = match (name, default, any) {
                (Some(n), _, _) => (MATCH_EXACT, Some(n.clone())),
                (None, true, _) => (MATCH_DEFAULT, None),
                (None, false, true) => (MATCH_ANY, None),
                (None, false, false) => return None,
            };
            Some(pb::ClientQuotaFilterComponent {
                entity_type: entity_type.to_string(),
                match_type,
                r#match: m,
            })
        };
        [
            side(USER, &self.user, self.default_user, self.any_user),
            side(
                CLIENT_ID,
                &self.client_id,
                self.default_client_id,
                self.any_client_id,
            ),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

fn set_ops(args: &SetArgs) -> Result<Vec<pb::ClientQuotaOp>> {
    let values = [
        (
            QuotaKey::ProducerByteRate,
            args.producer_byte_rate.map(|v| v as f64),
        ),
        (
            QuotaKey::ConsumerByteRate,
            args.consumer_byte_rate.map(|v| v as f64),
        ),
        (QuotaKey::RequestPercentage, args.request_percentage),
    ];
    let ops: Vec<pb::ClientQuotaOp> = values
        .into_iter()
        .filter_map(|(key, value)| {
            Some(pb::ClientQuotaOp {
                key: key.name().to_string(),
                value: value?,
                remove: false,
            })
        })
        .collect();
    if ops.is_empty() {
        bail!(
            "nothing to set: give --producer-byte-rate, --consumer-byte-rate or \
             --request-percentage"
        );
    }
    Ok(ops)
}

fn delete_ops(args: &DeleteArgs) -> Result<Vec<pb::ClientQuotaOp>> {
    let keys: Vec<QuotaKey> = [
        (QuotaKey::ProducerByteRate, args.producer_byte_rate),
        (QuotaKey::ConsumerByteRate, args.consumer_byte_rate),
        (QuotaKey::RequestPercentage, args.request_percentage),
    ]
    .into_iter()
    .filter(|(_, named)| *named || args.all)
    .map(|(key, _)| key)
    .collect();
    if keys.is_empty() {
        bail!(
            "nothing to delete: give --producer-byte-rate, --consumer-byte-rate, \
             --request-percentage or --all"
        );
    }
    Ok(keys
        .into_iter()
        .map(|key| pb::ClientQuotaOp {
            key: key.name().to_string(),
            value: 0.0,
            remove: true,
        })
        .collect())
}

/// How an entity is shown: `user alice, client-id <default>`.
fn entity_text(components: &[pb::ClientQuotaEntityComponent]) -> String {
    components
        .iter()
        .map(|c| format!("{} {}", c.entity_type, name_text(c.entity_name.as_deref())))
        .collect::<Vec<_>>()
        .join(", ")
}

fn name_text(name: Option<&str>) -> String {
    name.map_or_else(|| "<default>".to_string(), str::to_string)
}

pub(crate) async fn run(command: QuotaCommand, config: ClientConfig) -> Result<()> {
    let (entity, ops, validate_only) = match &command {
        QuotaCommand::Set(args) => (
            args.entity.components()?,
            set_ops(args)?,
            args.validate_only,
        ),
        QuotaCommand::Delete(args) => (args.entity.components()?, delete_ops(args)?, false),
        QuotaCommand::Describe(_) => (Vec::new(), Vec::new(), false),
    };
    let bootstrap = config.bootstrap_servers.join(",");
    let ctx = Ctx {
        bootstrap: &bootstrap,
        topic: None,
    };
    let fail = |e: syncline_client::ClientError| anyhow!(explain(&e, ctx));
    let admin = Admin::new(config).map_err(fail)?;
    match command {
        QuotaCommand::Set(_) | QuotaCommand::Delete(_) => {
            let deleting = matches!(command, QuotaCommand::Delete(_));
            let described = entity_text(&entity);
            let keys: Vec<String> = ops.iter().map(|o| o.key.clone()).collect();
            let results = admin
                .alter_client_quotas(
                    vec![pb::ClientQuotaAlteration { entity, ops }],
                    validate_only,
                )
                .await
                .map_err(fail)?;
            check_results(&described, &results)?;
            let verb = match (deleting, validate_only) {
                (true, _) => "Deleted",
                (false, true) => "Validated (nothing set)",
                (false, false) => "Set",
            };
            println!("{verb} {} of {described}", keys.join(", "));
        }
        QuotaCommand::Describe(args) => {
            let entries = admin
                .describe_client_quotas(args.components(), args.strict)
                .await
                .map_err(fail)?;
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&describe_json(&entries))?
                );
            } else {
                print!("{}", describe_table(&entries));
            }
        }
    }
    Ok(())
}

/// The entry's result as an error, if it was refused.
fn check_results(entity: &str, results: &[ClientQuotaAlterationResult]) -> Result<()> {
    let Some(r) = results.first() else {
        bail!("the broker answered without a result for {entity}");
    };
    match r.error {
        Some(code) => Err(anyhow!("{entity}: {code}: {}", r.message)),
        None => Ok(()),
    }
}

/// A value as set: byte rates are whole numbers.
fn value_text(key: &str, value: f64) -> String {
    if key == QuotaKey::RequestPercentage.name() {
        value.to_string()
    } else {
        format!("{value:.0}")
    }
}

fn describe_table(entries: &[pb::ClientQuotaEntry]) -> String {
    let keys = QuotaKey::ALL.map(QuotaKey::name);
    let mut header = vec!["USER", "CLIENT-ID"];
    header.extend(keys.iter().map(|k| match *k {
        "producer_byte_rate" => "PRODUCER_BYTE_RATE",
        "consumer_byte_rate" => "CONSUMER_BYTE_RATE",
        _ => "REQUEST_PERCENTAGE",
    }));
    let mut table = Table::new(&header);
    for e in entries {
        let side = |t: &str| {
            e.entity
                .iter()
                .find(|c| c.entity_type == t)
                .map_or_else(|| "-".to_string(), |c| name_text(c.entity_name.as_deref()))
        };
        let mut row = vec![side(USER), side(CLIENT_ID)];
        row.extend(keys.iter().map(|k| {
            e.values
                .iter()
                .find(|v| v.key == *k)
                .map_or_else(|| "-".to_string(), |v| value_text(k, v.value))
        }));
        table.row(row);
    }
    table.render()
}

/// Each entity as `{"entity": {"user": NAME|null}, "quotas": {KEY: VALUE}}`:
/// a side absent from `entity` is not part of it, null is its default.
fn describe_json(entries: &[pb::ClientQuotaEntry]) -> Value {
    entries
        .iter()
        .map(|e| {
            let entity: Map<String, Value> = e
                .entity
                .iter()
                .map(|c| (c.entity_type.clone(), json!(c.entity_name)))
                .collect();
            let quotas: Map<String, Value> = e
                .values
                .iter()
                .map(|v| {
                    let value = if v.key == QuotaKey::RequestPercentage.name() {
                        json!(v.value)
                    } else {
                        json!(v.value as u64)
                    };
                    (v.key.clone(), value)
                })
                .collect();
            json!({ "entity": entity, "quotas": quotas })
        })
        .collect()
}

#[cfg(test)]
mod tests {

    use super::*;

    fn parse(args: &[&str]) -> Result<QuotaCommand, clap::Error> {
        crate::args::parse_subcommand("quota", args)
    }

    #[test]
    fn set_names_an_entity_and_at_least_one_value() {
        let QuotaCommand::Set(s) = parse(&[
            "set",
            "--client-id",
            "slow",
            "--producer-byte-rate",
            "1048576",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            s.entity.components().unwrap(),
            vec![pb::ClientQuotaEntityComponent {
                entity_type: "client-id".into(),
                entity_name: Some("slow".into())
            }]
        );
        assert_eq!(set_ops(&s).unwrap()[0].value, 1_048_576.0);
        let QuotaCommand::Set(s) =
            parse(&["set", "--default-user", "--request-percentage", "50"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(s.entity.components().unwrap()[0].entity_name, None);
        let QuotaCommand::Set(s) = parse(&["set", "--producer-byte-rate", "1"]).unwrap() else {
            panic!()
        };
        assert!(s.entity.components().is_err(), "no entity");
        let QuotaCommand::Set(s) = parse(&["set", "--user", "alice"]).unwrap() else {
            panic!()
        };
        assert!(set_ops(&s).is_err(), "no value");
        assert!(parse(&[
            "set",
            "--user",
            "a",
            "--default-user",
            "--producer-byte-rate",
            "1"
        ])
        .is_err());
        assert!(parse(&["set", "--user", "a", "--producer-byte-rate", "-1"]).is_err());
        // A negative percentage reaches the controller, which says why it is refused.
        let QuotaCommand::Set(s) =
            parse(&["set", "--user", "a", "--request-percentage", "-3"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(set_ops(&s).unwrap()[0].value, -3.0);
    }

    #[test]
    fn delete_removes_the_keys_named_or_all() {
        let QuotaCommand::Delete(d) = parse(&["delete", "--user", "a", "--all"]).unwrap() else {
            panic!()
        };
        let keys: Vec<String> = delete_ops(&d).unwrap().into_iter().map(|o| o.key).collect();
        assert_eq!(
            keys,
            vec![
                "producer_byte_rate",
                "consumer_byte_rate",
                "request_percentage"
            ]
        );
        let QuotaCommand::Delete(d) = parse(&["delete", "--user", "a"]).unwrap() else {
            panic!()
        };
        assert!(delete_ops(&d).is_err());
        assert!(parse(&["delete", "--user", "a", "--all", "--producer-byte-rate"]).is_err());
    }

    #[test]
    fn describe_filters_are_kafkas_match_types() {
        let QuotaCommand::Describe(d) =
            parse(&["describe", "--user", "alice", "--any-client-id", "--strict"]).unwrap()
        else {
            panic!()
        };
        let c = d.components();
        assert_eq!(
            (c[0].match_type, c[0].r#match.as_deref()),
            (MATCH_EXACT, Some("alice"))
        );
        assert_eq!(
            (c[1].match_type, c[1].r#match.as_deref()),
            (MATCH_ANY, None)
        );
        assert!(d.strict);
        let entries = vec![pb::ClientQuotaEntry {
            entity: vec![pb::ClientQuotaEntityComponent {
                entity_type: "client-id".into(),
                entity_name: None,
            }],
            values: vec![pb::ClientQuotaValue {
                key: "producer_byte_rate".into(),
                value: 1024.0,
            }],
        }];
        let table = describe_table(&entries);
        assert!(
            table.contains("<default>") && table.contains("1024"),
            "{table}"
        );
        assert_eq!(
            describe_json(&entries),
            json!([{"entity": {"client-id": null}, "quotas": {"producer_byte_rate": 1024}}])
        );
    }
}
