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
use openraft::vote::RaftLeaderId;
use openraft::{BasicNode, OptionalSend, Raft, RaftNetworkFactory, RaftNetworkV2, Snapshot, Vote};
use serde::{Deserialize, Serialize};

use super::state_machine::StateMachine;
use super::types::{raft_id, voter_id, TypeConfig};

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

/// The start of every [`Request`]: its variant and the vote of the voter that sends
/// it (the candidate of a vote or pre-vote, the leader of an append or a snapshot).
/// postcard writes an enum's variant index and then its fields in order, and every
/// variant's first field is that vote, so decoding this prefix reads exactly it.
#[derive(Deserialize)]
enum RequestHead {
    Append(VoteOf<TypeConfig>),
    Vote(VoteOf<TypeConfig>),
    PreVote(VoteOf<TypeConfig>),
    Snapshot(VoteOf<TypeConfig>),
}

/// The voter a controller quorum request speaks for: the node its vote names. Every
/// request a voter sends names the sender itself, so a connection authenticated as
/// another voter must not carry it; `Err` for bytes that are no request.
pub fn request_sender(request: &[u8]) -> Result<i32, String> {
    let (head, _) = postcard::take_from_bytes::<RequestHead>(request)
        .map_err(|e| format!("undecodable controller quorum request: {e}"))?;
    let (RequestHead::Append(vote)
    | RequestHead::Vote(vote)
    | RequestHead::PreVote(vote)
    | RequestHead::Snapshot(vote)) = head;
    let node = *vote.leader_id.node_id();
    voter_id(node)
        .ok_or_else(|| format!("controller quorum request from voter id {node}, out of range"))
}

/// The bytes of a heartbeat from `leader` in `term`: an empty append with the vote a
/// quorum granted, what a leader's transport carries. For tests that forge quorum
/// traffic; `None` for a negative id.
pub fn heartbeat_request(leader: i32, term: u64) -> Option<Bytes> {
    let request = Request::Append(AppendEntriesRequest {
        vote: Vote::new_committed(term, raft_id(leader)?),
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    });
    postcard::to_allocvec(&request).ok().map(Bytes::from)
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

#[cfg(test)]
mod sender_tests {
    use openraft::alias::StoredMembershipOf;

    use super::*;

    fn encode(request: &Request) -> Vec<u8> {
        postcard::to_allocvec(request).unwrap()
    }

    #[test]
    fn every_request_names_the_voter_that_sends_it() {
        let vote = |node| Vote::new(7, node);
        let cases = vec![
            (
                "append",
                Request::Append(AppendEntriesRequest {
                    vote: vote(2),
                    prev_log_id: None,
                    entries: Vec::new(),
                    leader_commit: None,
                }),
                2,
            ),
            ("vote", Request::Vote(VoteRequest::new(vote(3), None)), 3),
            (
                "pre-vote",
                Request::PreVote(VoteRequest::new(vote(1), None)),
                1,
            ),
            (
                "snapshot",
                Request::Snapshot {
                    vote: vote(5),
                    meta: SnapshotMetaOf::<TypeConfig> {
                        last_log_id: None,
                        last_membership: StoredMembershipOf::<TypeConfig>::default(),
                    },
                    data: vec![1, 2, 3],
                },
                5,
            ),
        ];
        for (name, request, sender) in cases {
            assert_eq!(request_sender(&encode(&request)), Ok(sender), "{name}");
        }
        assert_eq!(
            request_sender(&heartbeat_request(4, 9).unwrap()),
            Ok(4),
            "the heartbeat helper"
        );
    }

    #[test]
    fn bytes_that_are_no_request_have_no_sender() {
        for bytes in [&[][..], &[9][..], &[0, 1][..]] {
            let err = request_sender(bytes).unwrap_err();
            assert!(err.contains("undecodable"), "{bytes:?}: {err}");
        }
        // A vote for a node id beyond i32 names no voter.
        let far = Request::Vote(VoteRequest::new(Vote::new(1, u64::MAX), None));
        assert!(request_sender(&encode(&far))
            .unwrap_err()
            .contains("out of range"));
    }
}
