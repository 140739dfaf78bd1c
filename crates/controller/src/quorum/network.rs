//! Voter-to-voter RPCs over the broker's [`QuorumTransport`].
//!
//! Each RPC is one request and one reply of bytes: a postcard-encoded [`Request`] or
//! [`Response`]. postcard is compact and binary (Raft's own structures, with metadata
//! records inside as protobuf bytes, see `MetadataBatch`), and it refuses malformed
//! input with an error, never a panic. Snapshots are small (one protobuf image) and
//! travel whole in one request.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use openraft::alias::{SnapshotMetaOf, SnapshotOf, VoteOf};
use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend, Raft, RaftNetworkFactory, RaftNetworkV2, Snapshot};
use serde::{Deserialize, Serialize};

use super::state_machine::StateMachine;
use super::types::{voter_id, TypeConfig};

/// How a voter reaches another: one request/response of opaque bytes. The broker
/// implements it over its own connections; tests use an in-memory router.
///
/// `call` sends `request` to voter `target` at `address` (the voter's entry in
/// [`QuorumConfig::voters`](super::QuorumConfig::voters)); the other side passes the
/// bytes to [`Quorum::handle_rpc`](super::Quorum::handle_rpc) and the reply comes
/// back. `Err` means the voter could not be reached or did not answer; the quorum
/// retries with a backoff. The quorum bounds every call with its own timeout.
pub trait QuorumTransport: Send + Sync + std::fmt::Debug + 'static {
    /// Sends one request to `target` and returns its reply.
    fn call(
        &self,
        target: i32,
        address: &str,
        request: Bytes,
    ) -> BoxFuture<'static, Result<Bytes, String>>;
}

/// A request from one voter to another.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Request {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<TypeConfig>),
    PreVote(VoteRequest<TypeConfig>),
    Snapshot {
        vote: VoteOf<TypeConfig>,
        meta: SnapshotMetaOf<TypeConfig>,
        /// A protobuf `MetadataSnapshot`.
        data: Vec<u8>,
    },
}

/// The reply to a [`Request`] of the same kind.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Response {
    Append(AppendEntriesResponse<TypeConfig>),
    Vote(VoteResponse<TypeConfig>),
    Snapshot(SnapshotResponse<TypeConfig>),
}

/// Runs a request on `raft` (the server side of an RPC).
pub(crate) async fn serve(
    raft: &Raft<TypeConfig, StateMachine>,
    request: &[u8],
) -> Result<Bytes, String> {
    let request: Request = postcard::from_bytes(request)
        .map_err(|e| format!("undecodable controller quorum request: {e}"))?;
    let response = match request {
        Request::Append(rpc) => {
            Response::Append(raft.append_entries(rpc).await.map_err(|e| e.to_string())?)
        }
        Request::Vote(rpc) => Response::Vote(raft.vote(rpc).await.map_err(|e| e.to_string())?),
        Request::PreVote(rpc) => {
            Response::Vote(raft.pre_vote(rpc).await.map_err(|e| e.to_string())?)
        }
        Request::Snapshot { vote, meta, data } => Response::Snapshot(
            raft.install_full_snapshot(
                vote,
                Snapshot {
                    meta,
                    snapshot: data,
                },
            )
            .await
            .map_err(|e| e.to_string())?,
        ),
    };
    postcard::to_allocvec(&response)
        .map(Bytes::from)
        .map_err(|e| format!("cannot encode the controller quorum reply: {e}"))
}

/// Makes one [`Client`] per peer.
#[derive(Debug, Clone)]
pub(crate) struct Network {
    pub(crate) transport: Arc<dyn QuorumTransport>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Client;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Client {
        Client {
            target,
            address: node.addr.clone(),
            transport: Arc::clone(&self.transport),
        }
    }
}

/// Sends RPCs to one peer.
#[derive(Debug)]
pub(crate) struct Client {
    target: u64,
    address: String,
    transport: Arc<dyn QuorumTransport>,
}

impl Client {
    /// One round trip, bounded by the RPC's hard time-to-live. Every failure is
    /// "unreachable" to openraft: it backs off and retries.
    async fn call(
        &self,
        request: &Request,
        option: &RPCOption,
    ) -> Result<Response, RPCError<TypeConfig>> {
        let unreachable = |what: String| RPCError::Unreachable(Unreachable::from_string(what));
        let target = voter_id(self.target)
            .ok_or_else(|| unreachable(format!("voter id {} out of range", self.target)))?;
        let bytes = postcard::to_allocvec(request)
            .map_err(|e| RPCError::Network(NetworkError::from_string(e.to_string())))?;
        let reply = self
            .transport
            .call(target, &self.address, Bytes::from(bytes));
        let reply = match tokio::time::timeout(option.hard_ttl(), reply).await {
            Err(_) => {
                return Err(unreachable(format!(
                    "voter {target} did not answer within {} ms",
                    option.hard_ttl().as_millis()
                )))
            }
            Ok(reply) => reply.map_err(|e| unreachable(format!("voter {target}: {e}")))?,
        };
        postcard::from_bytes(&reply).map_err(|e| {
            RPCError::Network(NetworkError::from_string(format!(
                "undecodable reply from voter {target}: {e}"
            )))
        })
    }
}

fn unexpected(target: u64) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::from_string(format!(
        "voter {target} answered with the wrong kind of reply"
    )))
}

impl RaftNetworkV2<TypeConfig> for Client {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self.call(&Request::Append(rpc), &option).await? {
            Response::Append(r) => Ok(r),
            _ => Err(unexpected(self.target)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self.call(&Request::Vote(rpc), &option).await? {
            Response::Vote(r) => Ok(r),
            _ => Err(unexpected(self.target)),
        }
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self.call(&Request::PreVote(rpc), &option).await? {
            Response::Vote(r) => Ok(r),
            _ => Err(unexpected(self.target)),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, Vec<u8>>,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let request = Request::Snapshot {
            vote,
            meta: snapshot.meta,
            data: snapshot.snapshot,
        };
        let reply = tokio::select! {
            closed = cancel => return Err(StreamingError::Closed(closed)),
            reply = self.call(&request, &option) => reply,
        };
        match reply {
            Ok(Response::Snapshot(r)) => Ok(r),
            Ok(_) => Err(StreamingError::Network(NetworkError::from_string(format!(
                "voter {} answered with the wrong kind of reply",
                self.target
            )))),
            Err(RPCError::Unreachable(e)) => Err(StreamingError::Unreachable(e)),
            Err(RPCError::Timeout(e)) => Err(StreamingError::Timeout(e)),
            Err(RPCError::Network(e)) => Err(StreamingError::Network(e)),
            Err(RPCError::RemoteError(e)) => Err(StreamingError::Network(
                NetworkError::from_string(e.to_string()),
            )),
        }
    }
}
