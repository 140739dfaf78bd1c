//! Small request helpers over a [`Connection`] for the end-to-end tests.

use bytes::Bytes;
use syncline_client::Connection;
use syncline_proto::batch::{BatchBuilder, BatchHeader};
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use syncline_proto::ErrorCode;

/// One batch holding `values`.
pub fn batch(values: &[Vec<u8>]) -> Bytes {
    let mut b = BatchBuilder::new(1_700_000_000_000);
    for v in values {
        b.push(1_700_000_000_000, None, Some(v), &[]);
    }
    b.finish()
}

/// Produces one batch; returns the partition's answer.
pub async fn produce(
    conn: &Connection,
    topic: &str,
    partition: i32,
    acks: i32,
    values: &[Vec<u8>],
) -> anyhow::Result<pb::ProducePartitionResponse> {
    produce_records(conn, topic, partition, acks, batch(values)).await
}

/// Produces `records` (whole batches, as built); returns the partition's answer.
pub async fn produce_records(
    conn: &Connection,
    topic: &str,
    partition: i32,
    acks: i32,
    records: Bytes,
) -> anyhow::Result<pb::ProducePartitionResponse> {
    let body = Body::Produce(pb::ProduceRequest {
        acks,
        timeout_ms: 5_000,
        topics: vec![pb::ProduceTopic {
            name: topic.into(),
            partitions: vec![pb::ProducePartition {
                partition,
                current_leader_epoch: None,
                records,
            }],
        }],
    });
    let resp = tokio::time::timeout(std::time::Duration::from_secs(15), conn.send(body)).await??;
    match resp {
        Resp::Produce(r) => r
            .topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .next()
            .ok_or_else(|| anyhow::anyhow!("empty produce response")),
        other => anyhow::bail!("unexpected {other:?}"),
    }
}

/// Every record (offset, value) of a partition from `from` up to its high
/// watermark, read from its leader as a consumer.
pub async fn read_all(
    conn: &Connection,
    topic: &str,
    partition: i32,
    from: i64,
) -> anyhow::Result<Vec<(i64, Vec<u8>)>> {
    Ok(read_batches(conn, topic, partition, from)
        .await?
        .into_iter()
        .flat_map(|(_, records)| records)
        .collect())
}

/// One fetched batch: its header and its (offset, value) records.
pub type FetchedBatch = (BatchHeader, Vec<(i64, Vec<u8>)>);

/// The batches of a fetch response's `records`, each with its (offset, value)
/// records at or after `from` (a batch is served whole, from its base offset).
pub fn decode_batches(records: &[u8], from: i64) -> anyhow::Result<Vec<FetchedBatch>> {
    let mut out = Vec::new();
    for b in syncline_proto::batch::split(records) {
        let (header, bytes) = b?;
        let mut kept = Vec::new();
        for r in syncline_proto::batch::records(bytes)?.iter() {
            let r = r?;
            if r.offset >= from {
                kept.push((r.offset, r.view.value.unwrap_or_default().to_vec()));
            }
        }
        out.push((header, kept));
    }
    Ok(out)
}

/// As [`read_all`], batch by batch with each batch's header (as stored: its
/// compression codec, its size).
pub async fn read_batches(
    conn: &Connection,
    topic: &str,
    partition: i32,
    from: i64,
) -> anyhow::Result<Vec<FetchedBatch>> {
    let mut out: Vec<FetchedBatch> = Vec::new();
    let mut offset = from;
    loop {
        let body = Body::Fetch(pb::FetchRequest {
            replica_id: -1,
            replica_epoch: -1,
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: 8 << 20,
            session_epoch: -1,
            topics: vec![pb::FetchTopic {
                topic: topic.into(),
                partitions: vec![pb::FetchPartition {
                    partition,
                    fetch_offset: offset,
                    partition_max_bytes: 4 << 20,
                    ..Default::default()
                }],
            }],
            ..Default::default()
        });
        let Resp::Fetch(r) = conn.send(body).await? else {
            anyhow::bail!("unexpected fetch response");
        };
        let p = r
            .responses
            .into_iter()
            .flat_map(|t| t.partitions)
            .next()
            .ok_or_else(|| anyhow::anyhow!("empty fetch response"))?;
        let code = ErrorCode::from_wire(p.error_code);
        anyhow::ensure!(code == ErrorCode::None, "fetch at {offset}: {code}");
        let before = out.len();
        for (header, records) in decode_batches(&p.records, offset)? {
            if let Some((last, _)) = records.last() {
                offset = last + 1;
                out.push((header, records));
            }
        }
        if out.len() == before || offset >= p.high_watermark {
            return Ok(out);
        }
    }
}
