//! Test helpers: a cluster whose metadata is preloaded and a fake peer on the
//! other end of an in-memory stream, answering whatever the test says. Not a
//! broker: each test scripts the answers it needs.

use std::sync::Arc;

use futures::{SinkExt, StreamExt};
use syncline_proto::{frame, pb};
use tokio::io::{DuplexStream, ReadHalf, WriteHalf};
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use crate::cluster::Cluster;
use crate::config::ClientConfig;
use crate::connection::Connection;
use crate::metadata::tests::{partition, response, topic};

/// The broker side of a connection.
pub(crate) struct Peer {
    frames: FramedRead<ReadHalf<DuplexStream>, LengthDelimitedCodec>,
    sink: FramedWrite<WriteHalf<DuplexStream>, LengthDelimitedCodec>,
}

impl Peer {
    /// The next request.
    pub(crate) async fn recv(&mut self) -> pb::Request {
        let f = self
            .frames
            .next()
            .await
            .expect("client closed")
            .expect("frame");
        frame::decode_request(f.freeze()).expect("request")
    }

    /// Answers request `to`.
    pub(crate) async fn reply(&mut self, to: &pb::Request, body: pb::response::Body) {
        let response = pb::Response {
            correlation_id: to.correlation_id,
            body: Some(body),
        };
        self.sink
            .send(frame::encode(&response))
            .await
            .expect("send");
    }

    /// The broker side of `stream`.
    pub(crate) fn new(stream: DuplexStream) -> Peer {
        let (r, w) = tokio::io::split(stream);
        Peer {
            frames: FramedRead::new(r, frame::codec(1 << 20)),
            sink: FramedWrite::new(w, frame::codec(1 << 20)),
        }
    }

    /// The next request, or `None` once the client closed the connection.
    pub(crate) async fn next_request(&mut self) -> Option<pb::Request> {
        let f = self.frames.next().await?.ok()?;
        Some(frame::decode_request(f.freeze()).expect("request"))
    }
}

/// A cluster of brokers 1..=3 knowing topic `t` with `partitions` partitions, all
/// led by broker 1 at leader epoch 5, with no connection yet.
pub(crate) fn cluster_unconnected(config: ClientConfig, partitions: i32) -> Arc<Cluster> {
    let cluster = Cluster::new(config).unwrap();
    let parts = (0..partitions)
        .map(|p| partition(p, 1, 5, &[1, 2, 3]))
        .collect();
    cluster.with_metadata_mut(|m| m.update(&response(vec![topic("t", parts)]), Instant::now()));
    cluster
}

/// [`cluster_unconnected`] and a fake peer standing in for broker 1.
pub(crate) fn cluster_with_peer(config: ClientConfig, partitions: i32) -> (Arc<Cluster>, Peer) {
    let cluster = cluster_unconnected(config, partitions);
    let (client_side, broker_side) = tokio::io::duplex(1 << 20);
    let addr = cluster.with_metadata(|m| m.brokers[&1].address());
    cluster.set_connection(
        1,
        Connection::from_stream(client_side, &addr, "test", 1 << 20),
    );
    (cluster, Peer::new(broker_side))
}
