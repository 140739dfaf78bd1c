//! Kafka's request and response frames, by the `kafka-protocol` crate: which
//! APIs and versions the listener speaks, decoding a request frame, encoding a
//! response. Pure, so that the fuzz target and the tests call it directly.

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterUserScramCredentialsRequest, ApiKey, ApiVersionsRequest,
    ApiVersionsResponse, CreateAclsRequest, CreateTopicsRequest, DeleteAclsRequest,
    DeleteTopicsRequest, DescribeAclsRequest, DescribeClientQuotasRequest, DescribeClusterRequest,
    DescribeConfigsRequest, DescribeGroupsRequest, DescribeUserScramCredentialsRequest,
    FetchRequest, FindCoordinatorRequest, HeartbeatRequest, InitProducerIdRequest,
    JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest, ListOffsetsRequest, MetadataRequest,
    OffsetCommitRequest, OffsetFetchRequest, OffsetForLeaderEpochRequest, ProduceRequest,
    RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable};

/// Kafka's `UNSUPPORTED_VERSION`.
pub const UNSUPPORTED_VERSION: i16 = 35;

/// Every API the Kafka listener answers and the versions it advertises in
/// ApiVersions: (API, min, max). Produce is advertised from 0 although
/// versions below 3 (the message formats before RecordBatch v2) are refused:
/// librdkafka turns compression off against brokers whose Produce minimum is
/// above 0 (KAFKA-18659), and it never sends those versions to a broker that
/// also speaks 3+.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 0, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 9),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::CreateTopics, 2, 5),
    (ApiKey::DeleteTopics, 1, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::FindCoordinator, 0, 3),
    (ApiKey::JoinGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 3),
    (ApiKey::Heartbeat, 0, 3),
    (ApiKey::LeaveGroup, 0, 3),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 7),
    (ApiKey::ListGroups, 0, 4),
    (ApiKey::DescribeGroups, 0, 5),
    // Advertised from 0, as librdkafka checks for v0 before it uses SASL at
    // all; but after a v0 handshake the mechanism's bytes come bare, not in
    // SaslAuthenticate frames, which this listener does not read (the
    // connection closes): every current client picks v1.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    // Users and ACLs. The ACL APIs' version 0 (no pattern type) is gone from
    // Kafka 4 and from kafka-protocol; every client that speaks them speaks 1.
    // At most 2, though 3 decodes too: kafka-python infers a Kafka 3.3
    // broker from DescribeAcls v3 and then sends Metadata versions past the
    // 9 advertised here (the other APIs' maxima are Kafka 2.8-3.0's).
    (ApiKey::DescribeAcls, 1, 2),
    (ApiKey::CreateAcls, 1, 2),
    (ApiKey::DeleteAcls, 1, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    // Client quotas (Kafka 3.0's versions).
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
];

/// The versions of Produce this listener decodes (see [`SUPPORTED`]).
const PRODUCE_DECODED_MIN: i16 = 3;

/// A decoded request of one of the [`SUPPORTED`] APIs.
#[derive(Debug, Clone, PartialEq)]
pub enum KafkaRequest {
    ApiVersions(ApiVersionsRequest),
    Metadata(MetadataRequest),
    Produce(ProduceRequest),
    Fetch(FetchRequest),
    ListOffsets(ListOffsetsRequest),
    OffsetForLeaderEpoch(OffsetForLeaderEpochRequest),
    InitProducerId(InitProducerIdRequest),
    CreateTopics(CreateTopicsRequest),
    DeleteTopics(DeleteTopicsRequest),
    DescribeConfigs(DescribeConfigsRequest),
    DescribeCluster(DescribeClusterRequest),
    FindCoordinator(FindCoordinatorRequest),
    JoinGroup(JoinGroupRequest),
    SyncGroup(SyncGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    OffsetCommit(OffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    ListGroups(ListGroupsRequest),
    DescribeGroups(DescribeGroupsRequest),
    SaslHandshake(SaslHandshakeRequest),
    SaslAuthenticate(SaslAuthenticateRequest),
    DescribeAcls(DescribeAclsRequest),
    CreateAcls(CreateAclsRequest),
    DeleteAcls(DeleteAclsRequest),
    DescribeUserScramCredentials(DescribeUserScramCredentialsRequest),
    AlterUserScramCredentials(AlterUserScramCredentialsRequest),
    DescribeClientQuotas(DescribeClientQuotasRequest),
    AlterClientQuotas(AlterClientQuotasRequest),
}

/// A request frame, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub api: ApiKey,
    pub version: i16,
    pub header: RequestHeader,
    pub request: KafkaRequest,
}

/// A frame the listener does not serve.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// Answer these bytes and go on: an ApiVersions request of a version this
    /// listener does not speak gets a v0 answer with `UNSUPPORTED_VERSION` and
    /// the supported versions, as Kafka's brokers give it (KIP-511).
    Answer(Bytes),
    /// Close the connection (Kafka's brokers do so for an unknown API, an
    /// unsupported version of any other API, or bytes that do not decode).
    Close(String),
}

fn supported(api: ApiKey, version: i16) -> bool {
    SUPPORTED
        .iter()
        .any(|&(a, min, max)| a == api && (min..=max).contains(&version))
        && !(api == ApiKey::Produce && version < PRODUCE_DECODED_MIN)
}

/// Decodes one request frame (without its 4-byte length).
pub fn decode(frame: Bytes) -> Result<Decoded, Refused> {
    if frame.len() < 8 {
        return Err(Refused::Close(format!(
            "a {}-byte frame is shorter than a request header",
            frame.len()
        )));
    }
    let (key, version) = {
        let mut peek = &frame[..4];
        (peek.get_i16(), peek.get_i16())
    };
    let Ok(api) = ApiKey::try_from(key) else {
        return Err(Refused::Close(format!("unknown API key {key}")));
    };
    if !supported(api, version) {
        if api == ApiKey::ApiVersions {
            let correlation_id = (&frame[4..8]).get_i32();
            let body = api_versions(UNSUPPORTED_VERSION);
            let answer = encode_response(ApiKey::ApiVersions, 0, correlation_id, &body)
                .map_err(Refused::Close)?;
            return Err(Refused::Answer(answer));
        }
        return Err(Refused::Close(format!(
            "{api:?} version {version} is not supported"
        )));
    }
    let mut buf = frame;
    let header = RequestHeader::decode(&mut buf, api.request_header_version(version))
        .map_err(|e| Refused::Close(format!("{api:?} v{version}: bad request header: {e}")))?;
    let bad = |e: anyhow::Error| Refused::Close(format!("{api:?} v{version}: bad request: {e}"));
    let request = match api {
        ApiKey::ApiVersions => {
            KafkaRequest::ApiVersions(ApiVersionsRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::Metadata => {
            KafkaRequest::Metadata(MetadataRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::Produce => {
            KafkaRequest::Produce(ProduceRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::Fetch => KafkaRequest::Fetch(FetchRequest::decode(&mut buf, version).map_err(bad)?),
        ApiKey::ListOffsets => {
            KafkaRequest::ListOffsets(ListOffsetsRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::OffsetForLeaderEpoch => KafkaRequest::OffsetForLeaderEpoch(
            OffsetForLeaderEpochRequest::decode(&mut buf, version).map_err(bad)?,
        ),
        ApiKey::InitProducerId => KafkaRequest::InitProducerId(
            InitProducerIdRequest::decode(&mut buf, version).map_err(bad)?,
        ),
        ApiKey::CreateTopics => {
            KafkaRequest::CreateTopics(CreateTopicsRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::DeleteTopics => {
            KafkaRequest::DeleteTopics(DeleteTopicsRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::DescribeConfigs => KafkaRequest::DescribeConfigs(
            DescribeConfigsRequest::decode(&mut buf, version).map_err(bad)?,
        ),
        ApiKey::DescribeCluster => KafkaRequest::DescribeCluster(
            DescribeClusterRequest::decode(&mut buf, version).map_err(bad)?,
        ),
        ApiKey::FindCoordinator => KafkaRequest::FindCoordinator(
            FindCoordinatorRequest::decode(&mut buf, version).map_err(bad)?,
        ),
        ApiKey::JoinGroup => {
            KafkaRequest::JoinGroup(JoinGroupRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::SyncGroup => {
            KafkaRequest::SyncGroup(SyncGroupRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::Heartbeat => {
            KafkaRequest::Heartbeat(HeartbeatRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::LeaveGroup => {
            KafkaRequest::LeaveGroup(LeaveGroupRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::OffsetCommit => {
            KafkaRequest::OffsetCommit(OffsetCommitRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::OffsetFetch => {
            KafkaRequest::OffsetFetch(OffsetFetchRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::ListGroups => {
            KafkaRequest::ListGroups(ListGroupsRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::DescribeGroups => KafkaRequest::DescribeGroups(
            DescribeGroupsRequest::decode(&mut buf, version).map_err(bad)?,
        ),
        ApiKey::SaslHandshake => KafkaRequest::SaslHandshake(
            SaslHandshakeRequest::decode(&mut buf, version).map_err(bad)?,
        ),
        ApiKey::SaslAuthenticate => KafkaRequest::SaslAuthenticate(
            SaslAuthenticateRequest::decode(&mut buf, version).map_err(bad)?,
        ),
        ApiKey::DescribeAcls => {
            KafkaRequest::DescribeAcls(DescribeAclsRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::CreateAcls => {
            KafkaRequest::CreateAcls(CreateAclsRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::DeleteAcls => {
            KafkaRequest::DeleteAcls(DeleteAclsRequest::decode(&mut buf, version).map_err(bad)?)
        }
        ApiKey::DescribeUserScramCredentials => KafkaRequest::DescribeUserScramCredentials(
            DescribeUserScramCredentialsRequest::decode(&mut buf, version).map_err(bad)?,
        ),
        ApiKey::AlterUserScramCredentials => KafkaRequest::AlterUserScramCredentials(
            AlterUserScramCredentialsRequest::decode(&mut buf, version).map_err(bad)?,
        ),
        ApiKey::DescribeClientQuotas => KafkaRequest::DescribeClientQuotas(
            DescribeClientQuotasRequest::decode(&mut buf, version).map_err(bad)?,
        ),
        ApiKey::AlterClientQuotas => KafkaRequest::AlterClientQuotas(
            AlterClientQuotasRequest::decode(&mut buf, version).map_err(bad)?,
        ),
        other => return Err(Refused::Close(format!("{other:?} is not served"))),
    };
    Ok(Decoded {
        api,
        version,
        header,
        request,
    })
}

/// The ApiVersions answer: every supported API with its versions.
pub fn api_versions(error_code: i16) -> ApiVersionsResponse {
    let mut response = ApiVersionsResponse::default();
    response.error_code = error_code;
    response.api_keys = SUPPORTED
        .iter()
        .map(|&(api, min, max)| {
            let mut v = kafka_protocol::messages::api_versions_response::ApiVersion::default();
            v.api_key = api as i16;
            v.min_version = min;
            v.max_version = max;
            v
        })
        .collect();
    response
}

/// A response frame (without its 4-byte length): the header of the version
/// `api` at `version` takes, then `body`. `Err` only if `body` holds a field
/// that version cannot carry (a bug here, never the client's doing).
pub fn encode_response<B: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &B,
) -> Result<Bytes, String> {
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, api.response_header_version(version))
        .and_then(|()| body.encode(&mut buf, version))
        .map_err(|e| format!("cannot encode the {api:?} v{version} response: {e}"))?;
    Ok(buf.freeze())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// kafka-python takes the newest Kafka whose marker version an API
    /// reaches as the broker's version, then uses that Kafka's versions of
    /// the others: no advertised maximum may mark a Kafka newer than 3.0
    /// (ListOffsets v7), or it asks for Metadata past v9.
    #[test]
    fn no_advertised_version_marks_a_kafka_newer_than_3_0() {
        let newer = [
            (ApiKey::DescribeAcls, 3),
            (ApiKey::JoinGroup, 9),
            (ApiKey::Fetch, 13),
            (ApiKey::ListOffsets, 8),
            (ApiKey::Produce, 11),
            (ApiKey::AddPartitionsToTxn, 4),
        ];
        for (api, marker) in newer {
            if let Some(&(_, _, max)) = SUPPORTED.iter().find(|(a, _, _)| *a == api) {
                assert!(max < marker, "{api:?} v{max} marks a newer Kafka");
            }
        }
    }
    use kafka_protocol::protocol::StrBytes;

    /// A request frame as a client sends it.
    pub(crate) fn frame<R: Encodable>(
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        body: &R,
    ) -> Bytes {
        let mut header = RequestHeader::default();
        header.request_api_key = api as i16;
        header.request_api_version = version;
        header.correlation_id = correlation_id;
        header.client_id = Some(StrBytes::from_static_str("test"));
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, api.request_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode_response(bytes: Bytes, version: i16) -> (i32, ApiVersionsResponse) {
        let mut buf = bytes;
        let header = ResponseHeader::decode(
            &mut buf,
            ApiKey::ApiVersions.response_header_version(version),
        )
        .unwrap();
        (
            header.correlation_id,
            ApiVersionsResponse::decode(&mut buf, version).unwrap(),
        )
    }

    #[test]
    fn requests_of_every_supported_version_decode() {
        for version in 0..=3 {
            let f = frame(
                ApiKey::ApiVersions,
                version,
                7,
                &ApiVersionsRequest::default(),
            );
            let d = decode(f).unwrap();
            assert_eq!(
                (d.api, d.version, d.header.correlation_id),
                (ApiKey::ApiVersions, version, 7)
            );
        }
        for version in 1..=9 {
            let f = frame(ApiKey::Metadata, version, 1, &MetadataRequest::default());
            assert!(
                matches!(decode(f).unwrap().request, KafkaRequest::Metadata(_)),
                "v{version}"
            );
        }
        for version in 3..=9 {
            let f = frame(ApiKey::Produce, version, 1, &ProduceRequest::default());
            assert!(
                matches!(decode(f).unwrap().request, KafkaRequest::Produce(_)),
                "v{version}"
            );
        }
        for version in 4..=12 {
            let f = frame(ApiKey::Fetch, version, 1, &FetchRequest::default());
            assert!(
                matches!(decode(f).unwrap().request, KafkaRequest::Fetch(_)),
                "v{version}"
            );
        }
    }

    #[test]
    fn a_too_new_api_versions_gets_a_v0_error_with_the_supported_list() {
        let mut f =
            BytesMut::from(&frame(ApiKey::ApiVersions, 3, 42, &ApiVersionsRequest::default())[..]);
        // As a client that speaks v9 would send it (the body is not read).
        f[2..4].copy_from_slice(&9i16.to_be_bytes());
        let Err(Refused::Answer(answer)) = decode(f.freeze()) else {
            panic!("expected an answer")
        };
        let (correlation_id, response) = decode_response(answer, 0);
        assert_eq!(correlation_id, 42);
        assert_eq!(response.error_code, UNSUPPORTED_VERSION);
        let produce = response
            .api_keys
            .iter()
            .find(|k| k.api_key == ApiKey::Produce as i16)
            .unwrap();
        assert_eq!((produce.min_version, produce.max_version), (0, 9));
    }

    /// A Fetch declaring two billion topics in a hundred bytes: refused as
    /// malformed, not an allocation of tens of gigabytes that aborts the broker
    /// (the fuzz target's finding; vendor/kafka-protocol/SYNCLINE.md).
    #[test]
    fn a_huge_array_length_is_refused_without_allocating() {
        let mut f = BytesMut::from(&frame(ApiKey::Fetch, 4, 1, &FetchRequest::default())[..]);
        // Fetch v4 after the header: replica_id, max_wait_ms, min_bytes,
        // max_bytes (4 bytes each), isolation_level (1), then the topics count.
        let at = f.len() - 4;
        f[at..].copy_from_slice(&0x7fff_fff0i32.to_be_bytes());
        f.extend_from_slice(&[0u8; 64]);
        match decode(f.freeze()) {
            Err(Refused::Close(why)) => assert!(why.contains("exceeds"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_apis_old_versions_and_garbage_close_the_connection() {
        let closes = |f: Bytes| matches!(decode(f), Err(Refused::Close(_)));
        assert!(closes(Bytes::from_static(&[0, 3])), "shorter than a header");
        assert!(
            closes(Bytes::from_static(&[0x7f, 0x7f, 0, 0, 0, 0, 0, 1])),
            "unknown key"
        );
        // Produce v2: advertised for librdkafka's sake, not decoded.
        let mut old = BytesMut::from(&frame(ApiKey::Produce, 3, 1, &ProduceRequest::default())[..]);
        old[2..4].copy_from_slice(&2i16.to_be_bytes());
        assert!(closes(old.freeze()));
        // Fetch v13 needs topic ids: not advertised.
        let mut f13 = BytesMut::from(&frame(ApiKey::Fetch, 12, 1, &FetchRequest::default())[..]);
        f13[2..4].copy_from_slice(&13i16.to_be_bytes());
        assert!(closes(f13.freeze()));
        // A header and then a body cut short.
        let cut = frame(ApiKey::Metadata, 9, 1, &MetadataRequest::default());
        let whole = frame(
            ApiKey::Produce,
            9,
            1,
            &ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(1000),
        );
        assert!(closes(whole.slice(..whole.len() - 3)));
        assert!(!closes(cut));
    }
}
