//! The client quota APIs (DescribeClientQuotas, AlterClientQuotas) as the
//! syncline requests the broker serves, and back. Both sides carry Kafka's
//! shapes (entity components with a null name for the default, match types,
//! double values), so fields are copied across.

use kafka_protocol::messages::{
    alter_client_quotas_response, describe_client_quotas_response, AlterClientQuotasRequest,
    AlterClientQuotasResponse, ApiKey, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;
use syncline_proto::pb;
use syncline_proto::pb::response::Body as Resp;
use syncline_proto::ErrorCode;

use crate::translate::{encode, text, whole_request_error, Reply, Route};

/// Kafka's nullable message: null when there is none.
fn message(m: &str) -> Option<StrBytes> {
    (!m.is_empty()).then(|| text(m))
}

fn component(entity_type: &StrBytes, name: Option<&StrBytes>) -> pb::ClientQuotaEntityComponent {
    pb::ClientQuotaEntityComponent {
        entity_type: entity_type.to_string(),
        entity_name: name.map(ToString::to_string),
    }
}

/// The code and message of an answer that is not the expected one (an
/// error response: not authorized, no active controller).
fn refusal(resp: &Resp) -> (i16, String) {
    whole_request_error(resp).unwrap_or((
        ErrorCode::UnknownServerError as i16,
        format!("the broker answered with another response: {resp:?}"),
    ))
}

pub(crate) fn describe_client_quotas(
    r: DescribeClientQuotasRequest,
    version: i16,
    cid: i32,
) -> Route {
    let body = pb::request::Body::DescribeClientQuotas(pb::DescribeClientQuotasRequest {
        components: r
            .components
            .iter()
            .map(|c| pb::ClientQuotaFilterComponent {
                entity_type: c.entity_type.to_string(),
                match_type: i32::from(c.match_type),
                r#match: c._match.as_ref().map(ToString::to_string),
            })
            .collect(),
        strict: r.strict,
    });
    let reply: Reply = Box::new(move |resp| {
        let mut out = DescribeClientQuotasResponse::default();
        let (code, m) = match &resp {
            Resp::DescribeClientQuotas(d) => (d.error_code as i16, d.error_message.clone()),
            other => refusal(other),
        };
        out.error_code = code;
        out.error_message = message(&m);
        // Null on an error, as Kafka answers it.
        out.entries = match resp {
            Resp::DescribeClientQuotas(d) if d.error_code == 0 => Some(
                d.entries
                    .iter()
                    .map(|e| {
                        let mut entry = describe_client_quotas_response::EntryData::default();
                        entry.entity = e
                            .entity
                            .iter()
                            .map(|c| {
                                let mut d = describe_client_quotas_response::EntityData::default();
                                d.entity_type = text(&c.entity_type);
                                d.entity_name = c.entity_name.as_deref().map(text);
                                d
                            })
                            .collect();
                        entry.values = e
                            .values
                            .iter()
                            .map(|v| {
                                let mut d = describe_client_quotas_response::ValueData::default();
                                d.key = text(&v.key);
                                d.value = v.value;
                                d
                            })
                            .collect();
                        entry
                    })
                    .collect(),
            ),
            _ => None,
        };
        encode(ApiKey::DescribeClientQuotas, version, cid, &out)
    });
    Route::Broker { body, reply }
}

pub(crate) fn alter_client_quotas(r: AlterClientQuotasRequest, version: i16, cid: i32) -> Route {
    let entries: Vec<pb::ClientQuotaAlteration> = r
        .entries
        .iter()
        .map(|e| pb::ClientQuotaAlteration {
            entity: e
                .entity
                .iter()
                .map(|c| component(&c.entity_type, c.entity_name.as_ref()))
                .collect(),
            ops: e
                .ops
                .iter()
                .map(|o| pb::ClientQuotaOp {
                    key: o.key.to_string(),
                    value: o.value,
                    remove: o.remove,
                })
                .collect(),
        })
        .collect();
    let asked: Vec<Vec<pb::ClientQuotaEntityComponent>> =
        entries.iter().map(|e| e.entity.clone()).collect();
    let body = pb::request::Body::AlterClientQuotas(pb::AlterClientQuotasRequest {
        entries,
        validate_only: r.validate_only,
        forwarded: false,
    });
    let reply: Reply = Box::new(move |resp| {
        let whole = match &resp {
            Resp::AlterClientQuotas(a) if a.error_code == 0 => None,
            Resp::AlterClientQuotas(a) => Some((a.error_code as i16, a.error_message.clone())),
            other => Some(refusal(other)),
        };
        let answered: &[pb::AlterClientQuotasResult] = match &resp {
            Resp::AlterClientQuotas(a) => &a.results,
            _ => &[],
        };
        let mut out = AlterClientQuotasResponse::default();
        // One result per entry, in order (the broker answers each in order).
        out.entries = asked
            .iter()
            .enumerate()
            .map(|(i, entity)| {
                let (code, m) = whole.clone().unwrap_or_else(|| {
                    answered.get(i).map_or_else(
                        || {
                            (
                                ErrorCode::UnknownServerError as i16,
                                "the broker's response has no result for this entry".to_string(),
                            )
                        },
                        |r| (r.error_code as i16, r.error_message.clone()),
                    )
                });
                let mut e = alter_client_quotas_response::EntryData::default();
                e.error_code = code;
                e.error_message = message(&m);
                e.entity = entity
                    .iter()
                    .map(|c| {
                        let mut d = alter_client_quotas_response::EntityData::default();
                        d.entity_type = text(&c.entity_type);
                        d.entity_name = c.entity_name.as_deref().map(text);
                        d
                    })
                    .collect();
                e
            })
            .collect();
        encode(ApiKey::AlterClientQuotas, version, cid, &out)
    });
    Route::Broker { body, reply }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::tests::{refused, response, through};
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;

    #[test]
    fn describe_client_quotas_goes_through_as_syncline_and_back() {
        let mut c = ComponentData::default();
        c.entity_type = text("client-id");
        c.match_type = 0;
        c._match = Some(text("slow"));
        let mut request = DescribeClientQuotasRequest::default();
        request.components = vec![c];
        request.strict = true;
        for version in 0..=1 {
            let (body, reply) = through(ApiKey::DescribeClientQuotas, version, &request);
            let bytes = reply(Resp::DescribeClientQuotas(
                pb::DescribeClientQuotasResponse {
                    error_code: 0,
                    error_message: String::new(),
                    entries: vec![pb::ClientQuotaEntry {
                        entity: vec![
                            pb::ClientQuotaEntityComponent {
                                entity_type: "user".into(),
                                entity_name: None,
                            },
                            pb::ClientQuotaEntityComponent {
                                entity_type: "client-id".into(),
                                entity_name: Some("slow".into()),
                            },
                        ],
                        values: vec![pb::ClientQuotaValue {
                            key: "producer_byte_rate".into(),
                            value: 1024.0,
                        }],
                    }],
                },
            ));
            assert_eq!(
                body,
                pb::request::Body::DescribeClientQuotas(pb::DescribeClientQuotasRequest {
                    components: vec![pb::ClientQuotaFilterComponent {
                        entity_type: "client-id".into(),
                        match_type: 0,
                        r#match: Some("slow".into()),
                    }],
                    strict: true,
                })
            );
            let r: DescribeClientQuotasResponse =
                response(ApiKey::DescribeClientQuotas, version, bytes);
            assert_eq!(r.error_code, 0);
            let entries = r.entries.expect("entries");
            assert_eq!(entries.len(), 1);
            assert_eq!(entries[0].entity[0].entity_name, None, "the default user");
            assert_eq!(entries[0].entity[1].entity_name.as_deref(), Some("slow"));
            assert_eq!(entries[0].values[0].value, 1024.0);
        }
    }

    #[test]
    fn alter_client_quotas_answers_each_entry_in_order_or_all_with_a_refusal() {
        let mut entity = EntityData::default();
        entity.entity_type = text("client-id");
        entity.entity_name = None;
        let mut op = OpData::default();
        op.key = text("producer_byte_rate");
        op.value = 2048.0;
        let mut remove = OpData::default();
        remove.key = text("consumer_byte_rate");
        remove.remove = true;
        let mut entry = EntryData::default();
        entry.entity = vec![entity];
        entry.ops = vec![op, remove];
        let mut request = AlterClientQuotasRequest::default();
        request.entries = vec![entry.clone(), entry];
        request.validate_only = true;
        let answer = Resp::AlterClientQuotas(pb::AlterClientQuotasResponse {
            error_code: 0,
            error_message: String::new(),
            results: vec![
                pb::AlterClientQuotasResult::default(),
                pb::AlterClientQuotasResult {
                    error_code: ErrorCode::InvalidRequest as i32,
                    error_message: "twice".into(),
                    entity: vec![],
                },
            ],
        });
        for version in 0..=1 {
            let (body, reply) = through(ApiKey::AlterClientQuotas, version, &request);
            let bytes = reply(answer.clone());
            let pb::request::Body::AlterClientQuotas(asked) = body else {
                panic!("not an AlterClientQuotas: {body:?}")
            };
            assert!(asked.validate_only);
            assert_eq!(asked.entries[0].entity[0].entity_name, None);
            assert_eq!(
                asked.entries[0].ops,
                vec![
                    pb::ClientQuotaOp {
                        key: "producer_byte_rate".into(),
                        value: 2048.0,
                        remove: false
                    },
                    pb::ClientQuotaOp {
                        key: "consumer_byte_rate".into(),
                        value: 0.0,
                        remove: true
                    }
                ]
            );
            let r: AlterClientQuotasResponse = response(ApiKey::AlterClientQuotas, version, bytes);
            let codes: Vec<i16> = r.entries.iter().map(|e| e.error_code).collect();
            assert_eq!(codes, vec![0, ErrorCode::InvalidRequest as i16]);
            assert_eq!(r.entries[1].error_message.as_deref(), Some("twice"));
            assert_eq!(r.entries[0].entity[0].entity_type.as_str(), "client-id");
            // Refused whole (not authorized): every entry says so.
            let (_, reply) = through(ApiKey::AlterClientQuotas, version, &request);
            let bytes = reply(refused());
            let r: AlterClientQuotasResponse = response(ApiKey::AlterClientQuotas, version, bytes);
            assert!(r.entries.iter().all(|e| e.error_code == 31));
        }
    }
}
