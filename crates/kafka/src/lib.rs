//! Kafka's wire protocol for syncline's Kafka listeners (`kafka_listeners`).
//!
//! - [`codec`]: the APIs and versions spoken ([`codec::SUPPORTED`]), request
//!   frames decoded and response frames encoded, by the `kafka-protocol` crate.
//! - [`translate`]: each Kafka request as the syncline request the broker already
//!   serves, and the syncline response back as the Kafka response of the version
//!   asked; record batches pass through untouched.
//!
//! Pure: the broker's `kafka` module owns the connections, and the fuzz target
//! drives [`answer_refused`] with arbitrary frames.

mod admin;
pub mod codec;
mod groups;
mod quotas;
mod security;
pub mod translate;

use bytes::Bytes;

/// What the listener answers to `frame` if the broker refuses the request as a
/// whole: `None` when the frame closes the connection, else the response
/// frame (never empty: every decoded request has an encodable answer). For the
/// fuzz target and the tests: it runs every step a frame takes except the
/// broker's.
pub fn answer_refused(frame: Bytes) -> Option<Bytes> {
    use syncline_proto::pb;
    let decoded = match codec::decode(frame) {
        Ok(d) => d,
        Err(codec::Refused::Answer(answer)) => return Some(answer),
        Err(codec::Refused::Close(_)) => return None,
    };
    Some(match translate::route(decoded) {
        translate::Route::Answer(answer) => answer,
        translate::Route::Broker { reply, .. } => {
            reply(pb::response::Body::Error(pb::ErrorResponse {
                error_code: syncline_proto::ErrorCode::ClusterAuthorizationFailed as i32,
                error_message: "refused".into(),
                controller_hint: None,
            }))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiKey, MetadataRequest};

    #[test]
    fn a_refused_request_is_answered_and_garbage_is_not() {
        let frame = codec::tests::frame(ApiKey::Metadata, 9, 5, &MetadataRequest::default());
        let answer = answer_refused(frame).expect("answered");
        assert_eq!(&answer[..4], &5i32.to_be_bytes(), "the correlation id");
        assert_eq!(answer_refused(Bytes::from_static(b"garbage!!")), None);
    }
}
