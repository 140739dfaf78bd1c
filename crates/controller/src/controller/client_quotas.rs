//! `AlterClientQuotas`: client quotas set and removed (Kafka's
//! `ClientQuotaControlManager`). The rules of what an entity, a key and a
//! value may be are `crate::client_quotas`; the quotas live in the metadata
//! image and reach every broker whole, in `LeaderAndIsr`.

use std::collections::BTreeMap;

use syncline_proto::{pb, ErrorCode};

use super::{Controller, ControllerResult};
use crate::client_quotas::{ClientQuotaEntity, QuotaKey};
use crate::records;

impl Controller {
    /// `AlterClientQuotas`: one result per entry, in order. An entry's changes
    /// are all made or none: NONE and a `ClientQuotaRecord` per key whose value
    /// changes (a key set to its current value, or removed while unset, is no
    /// change); otherwise INVALID_REQUEST with the first problem found: an
    /// invalid entity (none, an unknown or repeated type, an empty name, `ip`),
    /// an unknown key, a value of zero or less, a byte rate that is not a whole
    /// number, a key changed twice, or an entity that an earlier entry of the
    /// same request changes too. `validate_only`: the same results, no records.
    pub fn alter_client_quotas(
        &self,
        req: &pb::AlterClientQuotasRequest,
    ) -> ControllerResult<pb::AlterClientQuotasResponse> {
        let mut records = Vec::new();
        let mut seen: Vec<ClientQuotaEntity> = Vec::new();
        let results = req
            .entries
            .iter()
            .map(|entry| {
                let outcome = self.alter_entity(entry, &mut seen);
                let (code, message) = match outcome {
                    Ok(changes) => {
                        if !req.validate_only && !changes.is_empty() {
                            tracing::info!(changes = changes.len(), "altering client quotas");
                            records.extend(changes);
                        }
                        (ErrorCode::None, String::new())
                    }
                    Err(why) => (ErrorCode::InvalidRequest, why),
                };
                pb::AlterClientQuotasResult {
                    error_code: code as i32,
                    error_message: message,
                    entity: entry.entity.clone(),
                }
            })
            .collect();
        ControllerResult::new(
            pb::AlterClientQuotasResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                results,
            },
            records,
        )
    }

    /// The records of one entry's changes, or why it is refused.
    fn alter_entity(
        &self,
        entry: &pb::ClientQuotaAlteration,
        seen: &mut Vec<ClientQuotaEntity>,
    ) -> Result<Vec<pb::MetadataRecord>, String> {
        let entity = ClientQuotaEntity::from_pb(&entry.entity)?;
        if seen.contains(&entity) {
            return Err(format!(
                "{entity} is altered by more than one entry of the request: give each entity one \
                 entry"
            ));
        }
        seen.push(entity.clone());
        let mut changes: BTreeMap<QuotaKey, Option<f64>> = BTreeMap::new();
        for op in &entry.ops {
            let key = if op.remove {
                QuotaKey::from_name(&op.key)?
            } else {
                QuotaKey::check(&op.key, op.value)?
            };
            let value = (!op.remove).then_some(op.value);
            if changes.insert(key, value).is_some() {
                return Err(format!(
                    "{entity}: quota {} is changed more than once: give each key once",
                    op.key
                ));
            }
        }
        let current = self.image.client_quotas().get(&entity);
        Ok(changes
            .into_iter()
            .filter(|(key, value)| {
                let now = current.and_then(|v| v.get(*key));
                now.map(f64::to_bits) != value.map(f64::to_bits)
            })
            .map(|(key, value)| records::client_quota_record(&entity, key, value))
            .collect())
    }
}
