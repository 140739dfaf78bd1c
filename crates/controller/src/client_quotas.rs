//! Client quotas as the metadata log keeps them (Kafka's KIP-13, KIP-124,
//! KIP-257): which entities may carry a quota, which keys and values are
//! valid, and which entities a DescribeClientQuotas filter selects.
//!
//! An entity is a user, a client id, or both, each a name or Kafka's
//! `<default>`; Kafka's third entity type, `ip` (connection-creation rates),
//! is not supported. The controller checks alterations with these rules
//! ([`ClientQuotaEntity::from_pb`], [`QuotaKey::check`]), the image checks the
//! records it replays with them, and a broker answers DescribeClientQuotas
//! from its copy of the image with [`describe`].

use std::collections::BTreeMap;

use syncline_proto::{pb, ErrorCode};

/// Kafka's entity type of users.
pub const USER: &str = "user";
/// Kafka's entity type of client ids.
pub const CLIENT_ID: &str = "client-id";
/// Kafka's entity type of client addresses (not supported here).
const IP: &str = "ip";

/// DescribeClientQuotas' match types (Kafka's `MATCH_TYPE_*`).
pub const MATCH_EXACT: i32 = 0;
/// Matches the default entity of a type.
pub const MATCH_DEFAULT: i32 = 1;
/// Matches any entity of a type, named or default (Kafka's
/// `MATCH_TYPE_SPECIFIED`).
pub const MATCH_ANY: i32 = 2;

/// One side of an entity: Kafka's `<default>`, or a name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaName {
    /// Every user (or client id) without a quota of its own.
    Default,
    /// One user or client id.
    Named(String),
}

impl QuotaName {
    fn of(name: Option<&String>) -> QuotaName {
        name.map_or(QuotaName::Default, |n| QuotaName::Named(n.clone()))
    }

    fn to_pb(&self) -> Option<String> {
        match self {
            QuotaName::Default => None,
            QuotaName::Named(n) => Some(n.clone()),
        }
    }
}

impl std::fmt::Display for QuotaName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QuotaName::Default => f.write_str("<default>"),
            QuotaName::Named(n) => write!(f, "{n:?}"),
        }
    }
}

/// A quota entity: a user, a client id, or both. Never neither.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientQuotaEntity {
    /// The user side, if the entity has one.
    pub user: Option<QuotaName>,
    /// The client-id side, if the entity has one.
    pub client_id: Option<QuotaName>,
}

impl ClientQuotaEntity {
    /// The entity of Kafka's entity components, checked as Kafka's controller
    /// checks them (`validateEntity`): at least one component, each type once,
    /// `user` or `client-id` only, no empty name (the default is an absent
    /// name). The error is the message INVALID_REQUEST carries.
    pub fn from_pb(components: &[pb::ClientQuotaEntityComponent]) -> Result<Self, String> {
        if components.is_empty() {
            return Err(
                "invalid empty client quota entity: name a user, a client id or both".to_string(),
            );
        }
        let mut entity = ClientQuotaEntity {
            user: None,
            client_id: None,
        };
        for c in components {
            let side =
                match c.entity_type.as_str() {
                    USER => &mut entity.user,
                    CLIENT_ID => &mut entity.client_id,
                    IP => return Err(
                        "ip quotas (connection_creation_rate) are not supported: quota a user or \
                         a client id"
                            .to_string(),
                    ),
                    other => {
                        return Err(format!(
                            "unhandled client quota entity type {other:?}: use {USER:?} or \
                         {CLIENT_ID:?}"
                        ))
                    }
                };
            if side.is_some() {
                return Err(format!(
                    "invalid client quota entity: duplicate entity entry {:?}",
                    c.entity_type
                ));
            }
            if c.entity_name.as_deref() == Some("") {
                return Err(format!(
                    "empty {} not supported (the default {} has no name)",
                    c.entity_type, c.entity_type
                ));
            }
            *side = Some(QuotaName::of(c.entity_name.as_ref()));
        }
        Ok(entity)
    }

    /// Kafka's entity components: the user first, then the client id.
    pub fn to_pb(&self) -> Vec<pb::ClientQuotaEntityComponent> {
        [(USER, &self.user), (CLIENT_ID, &self.client_id)]
            .into_iter()
            .filter_map(|(entity_type, name)| {
                Some(pb::ClientQuotaEntityComponent {
                    entity_type: entity_type.to_string(),
                    entity_name: name.as_ref()?.to_pb(),
                })
            })
            .collect()
    }

    /// The side of `entity_type`, if the entity has it (`None` for an unknown
    /// type).
    fn side(&self, entity_type: &str) -> Option<&QuotaName> {
        match entity_type {
            USER => self.user.as_ref(),
            CLIENT_ID => self.client_id.as_ref(),
            _ => None,
        }
    }

    fn sides(&self) -> usize {
        usize::from(self.user.is_some()) + usize::from(self.client_id.is_some())
    }
}

impl std::fmt::Display for ClientQuotaEntity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sep = "";
        if let Some(u) = &self.user {
            write!(f, "user {u}")?;
            sep = " ";
        }
        if let Some(c) = &self.client_id {
            write!(f, "{sep}client-id {c}")?;
        }
        Ok(())
    }
}

/// A quota key (Kafka's `QuotaConfigs`), less `controller_mutation_rate`
/// (KIP-599), which syncline does not enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaKey {
    /// Bytes a second a client may produce.
    ProducerByteRate,
    /// Bytes a second a client may fetch as a consumer.
    ConsumerByteRate,
    /// Percent of one request handler thread a client's requests may take
    /// over the quota window (KIP-124).
    RequestPercentage,
}

impl QuotaKey {
    /// Every key.
    pub const ALL: [QuotaKey; 3] = [
        QuotaKey::ProducerByteRate,
        QuotaKey::ConsumerByteRate,
        QuotaKey::RequestPercentage,
    ];

    /// Kafka's name of the key.
    pub fn name(self) -> &'static str {
        match self {
            QuotaKey::ProducerByteRate => "producer_byte_rate",
            QuotaKey::ConsumerByteRate => "consumer_byte_rate",
            QuotaKey::RequestPercentage => "request_percentage",
        }
    }

    /// The key of a name, or the message INVALID_REQUEST carries.
    pub fn from_name(name: &str) -> Result<QuotaKey, String> {
        QuotaKey::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                format!(
                    "invalid quota key {name:?}: use producer_byte_rate, consumer_byte_rate or \
                     request_percentage"
                )
            })
    }

    /// Checks a value set for `name` as Kafka's controller does
    /// (`validateQuotaKeyValue`): a known key, a value above zero, a whole
    /// number for the byte rates (Kafka's LONG configs) that fits in an i64.
    pub fn check(name: &str, value: f64) -> Result<QuotaKey, String> {
        let key = QuotaKey::from_name(name)?;
        // NaN is not finite: refused here too.
        if !value.is_finite() || value <= 0.0 {
            return Err(format!("quota {name} must be greater than 0, got {value}"));
        }
        match key {
            QuotaKey::RequestPercentage => Ok(key),
            QuotaKey::ProducerByteRate | QuotaKey::ConsumerByteRate => {
                if value >= i64::MAX as f64 {
                    return Err(format!(
                        "proposed value for {name} is too large for a LONG: {value}"
                    ));
                }
                if value.fract() != 0.0 {
                    return Err(format!(
                        "integer value expected for {name} (bytes a second), got {value}"
                    ));
                }
                Ok(key)
            }
        }
    }
}

/// An entity's quotas, by key. Values are Kafka's doubles, compared by their
/// bits (so the image can be `Eq`: no NaN ever passes [`QuotaKey::check`]).
#[derive(Debug, Clone, Default)]
pub struct QuotaValues(BTreeMap<QuotaKey, f64>);

impl PartialEq for QuotaValues {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|((k1, v1), (k2, v2))| k1 == k2 && v1.to_bits() == v2.to_bits())
    }
}

impl Eq for QuotaValues {}

impl QuotaValues {
    /// The value of `key`.
    pub fn get(&self, key: QuotaKey) -> Option<f64> {
        self.0.get(&key).copied()
    }

    /// Every key and value, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (QuotaKey, f64)> + '_ {
        self.0.iter().map(|(k, v)| (*k, *v))
    }

    pub(crate) fn set(&mut self, key: QuotaKey, value: Option<f64>) -> Option<f64> {
        match value {
            Some(v) => self.0.insert(key, v),
            None => self.0.remove(&key),
        }
    }

    /// Whether no key is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn to_pb(&self) -> Vec<pb::ClientQuotaValue> {
        self.0
            .iter()
            .map(|(k, v)| pb::ClientQuotaValue {
                key: k.name().to_string(),
                value: *v,
            })
            .collect()
    }
}

/// Every entity's quotas, as the image keeps them.
pub type ClientQuotaMap = BTreeMap<ClientQuotaEntity, QuotaValues>;

/// The map as `LeaderAndIsr` announces it and snapshots store it.
pub fn image_to_pb(quotas: &ClientQuotaMap) -> pb::ClientQuotaImage {
    pb::ClientQuotaImage {
        entries: quotas
            .iter()
            .map(|(entity, values)| pb::ClientQuotaEntry {
                entity: entity.to_pb(),
                values: values.to_pb(),
            })
            .collect(),
    }
}

/// The map an announced or stored image describes, each entry checked as a
/// record is: a valid entity, each once; valid keys and values, each once.
pub fn image_from_pb(image: &pb::ClientQuotaImage) -> Result<ClientQuotaMap, String> {
    let mut quotas = ClientQuotaMap::new();
    for e in &image.entries {
        let entity = ClientQuotaEntity::from_pb(&e.entity)?;
        let mut values = QuotaValues::default();
        for v in &e.values {
            let key = QuotaKey::check(&v.key, v.value).map_err(|why| format!("{entity}: {why}"))?;
            if values.set(key, Some(v.value)).is_some() {
                return Err(format!("{entity}: quota {} appears twice", v.key));
            }
        }
        if values.is_empty() {
            return Err(format!("{entity} has no quota"));
        }
        if quotas.insert(entity.clone(), values).is_some() {
            return Err(format!("{entity} appears twice"));
        }
    }
    Ok(quotas)
}

/// What one filter component asks of an entity's side.
enum Match {
    /// That name.
    Exact(String),
    /// The default.
    Default,
    /// Any name or the default.
    Any,
}

/// DescribeClientQuotas (Kafka's `ClientQuotasImage.describe`): the entities
/// every component matches, sorted; with `strict`, only those without another
/// entity type. No component matches every entity (strict: none). A filter
/// that names a type twice, an unknown type or match type, or a match string
/// where none belongs (or none where one does) is answered INVALID_REQUEST.
pub fn describe(
    quotas: &ClientQuotaMap,
    req: &pb::DescribeClientQuotasRequest,
) -> pb::DescribeClientQuotasResponse {
    match matching(quotas, req) {
        Ok(entries) => pb::DescribeClientQuotasResponse {
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            entries,
        },
        Err(why) => pb::DescribeClientQuotasResponse {
            error_code: ErrorCode::InvalidRequest as i32,
            error_message: why,
            entries: Vec::new(),
        },
    }
}

fn matching(
    quotas: &ClientQuotaMap,
    req: &pb::DescribeClientQuotasRequest,
) -> Result<Vec<pb::ClientQuotaEntry>, String> {
    let mut filter: Vec<(&str, Match)> = Vec::new();
    for c in &req.components {
        let t = c.entity_type.as_str();
        if t.is_empty() {
            return Err("invalid empty entity type in the filter".to_string());
        }
        if filter.iter().any(|(seen, _)| *seen == t) {
            return Err(format!(
                "entity type {t:?} cannot appear more than once in the filter"
            ));
        }
        if t != USER && t != CLIENT_ID {
            return Err(format!(
                "unsupported entity type {t:?} in the filter: use {USER:?} or {CLIENT_ID:?}"
            ));
        }
        let m = match (c.match_type, &c.r#match) {
            (MATCH_EXACT, Some(name)) => Match::Exact(name.clone()),
            (MATCH_EXACT, None) => {
                return Err(format!(
                    "the {t} filter matches exactly (match type 0) but gives no name"
                ))
            }
            (MATCH_DEFAULT, None) => Match::Default,
            (MATCH_ANY, None) => Match::Any,
            (MATCH_DEFAULT | MATCH_ANY, Some(_)) => {
                return Err(format!(
                    "the {t} filter matches the default or any (match type {}) but also gives a \
                     name",
                    c.match_type
                ))
            }
            (other, _) => {
                return Err(format!(
                    "unknown match type {other} in the {t} filter: use 0 (exact), 1 (default) or \
                     2 (any)"
                ))
            }
        };
        filter.push((t, m));
    }
    let selects = |entity: &ClientQuotaEntity| {
        (!req.strict || entity.sides() == filter.len())
            && filter.iter().all(|(t, m)| match (entity.side(t), m) {
                (None, _) => false,
                (Some(_), Match::Any) => true,
                (Some(QuotaName::Default), Match::Default) => true,
                (Some(QuotaName::Named(n)), Match::Exact(want)) => n == want,
                _ => false,
            })
    };
    Ok(quotas
        .iter()
        .filter(|(entity, _)| selects(entity))
        .map(|(entity, values)| pb::ClientQuotaEntry {
            entity: entity.to_pb(),
            values: values.to_pb(),
        })
        .collect())
}
