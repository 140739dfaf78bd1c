//! SASL SCRAM (RFC 5802, RFC 7677), without channel binding, as Kafka speaks it.
//!
//! One exchange is four messages:
//!
//! 1. client-first (`n,,n=USER,r=CLIENT_NONCE`), sent by [`ScramClient::start`];
//! 2. server-first (`r=NONCE,s=SALT,i=ITERATIONS`), from
//!    [`ScramServer::client_first`];
//! 3. client-final (`c=biws,r=NONCE,p=PROOF`), from [`ScramClient::server_first`];
//! 4. server-final (`v=SIGNATURE`), from [`ScramServer::client_final`], checked by
//!    [`ScramClient::server_final`].
//!
//! The server stores a [`Verifier`] per user, never the password. The code is
//! generic over the hash: [`Mechanism::ScramSha256`] (brokers among themselves)
//! and [`Mechanism::ScramSha512`].
//!
//! Usernames and passwords are used as their UTF-8 bytes, without SASLprep
//! normalisation (as Kafka does); broker passwords are base64 text anyway.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// The fewest PBKDF2 iterations a client accepts in server-first (RFC 7677's
/// minimum, and Kafka's).
pub const MIN_ITERATIONS: u32 = 4096;

/// The most PBKDF2 iterations a client accepts in server-first, so that a hostile
/// server cannot make it burn CPU.
pub const MAX_ITERATIONS: u32 = 1_000_000;

/// How many bytes of randomness go into a nonce (base64-encoded on the wire).
const NONCE_BYTES: usize = 24;

/// How many salted passwords a [`ClientCredential`] remembers.
const CACHE_ENTRIES: usize = 4;

/// A SCRAM mechanism: which hash the exchange uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// `SCRAM-SHA-256` (RFC 7677).
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
}

/// Runs `$body` with `$d` bound to the hash type of `$mechanism`.
macro_rules! with_hash {
    ($mechanism:expr, $d:ident => $body:expr) => {
        match $mechanism {
            Mechanism::ScramSha256 => {
                type $d = Sha256;
                $body
            }
            Mechanism::ScramSha512 => {
                type $d = Sha512;
                $body
            }
        }
    };
}

impl Mechanism {
    /// Every supported mechanism.
    pub const ALL: [Mechanism; 2] = [Mechanism::ScramSha256, Mechanism::ScramSha512];

    /// The SASL name: `"SCRAM-SHA-256"` or `"SCRAM-SHA-512"`.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism of a SASL name, matched exactly (case-sensitive, as Kafka).
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Length in bytes of the hash's output (and so of keys, proofs, signatures).
    pub(crate) fn output_len(self) -> usize {
        with_hash!(self, D => <D as Digest>::output_size())
    }

    /// H(data).
    fn hash(self, data: &[u8]) -> Vec<u8> {
        with_hash!(self, D => D::digest(data).to_vec())
    }

    /// HMAC(key, data).
    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        with_hash!(self, D => {
            let mut mac = <Hmac<D> as Mac>::new_from_slice(key)
                .expect("HMAC takes a key of any length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        })
    }

    /// Hi(password, salt, iterations): PBKDF2 with HMAC of the hash.
    fn salted_password(self, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0; self.output_len()];
        with_hash!(self, D => pbkdf2::pbkdf2_hmac::<D>(password.as_bytes(), salt, iterations, &mut out));
        out
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a server stores for one user: never the password.
///
/// Knowing a verifier lets a server check a client's proof and prove itself to
/// the client, but not log in as the user.
#[derive(Clone, PartialEq, Eq)]
pub struct Verifier {
    /// The mechanism (hash) the keys were made with.
    pub mechanism: Mechanism,
    /// The PBKDF2 salt.
    pub salt: Vec<u8>,
    /// The PBKDF2 iteration count.
    pub iterations: u32,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
}

impl Verifier {
    /// The iteration count of [`Verifier::generate`].
    pub const DEFAULT_ITERATIONS: u32 = 4096;

    /// From a password, a salt and an iteration count (iterations >= 4096 are
    /// enforced by callers, not here).
    pub fn new(mechanism: Mechanism, password: &str, salt: &[u8], iterations: u32) -> Verifier {
        let salted = mechanism.salted_password(password, salt, iterations);
        let keys = Keys::from_salted_password(mechanism, &salted);
        Verifier {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: keys.stored_key,
            server_key: keys.server_key,
        }
    }

    /// From a salted password (`Hi(password, salt, iterations)`, as Kafka's
    /// AlterUserScramCredentials carries it) rather than the password itself.
    /// The salted password is not checked: one whose length is not the hash's
    /// output is no salted password of `mechanism`, which callers see as
    /// `stored_key.len() != salted_password.len()`.
    pub fn from_salted_password(
        mechanism: Mechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Verifier {
        let keys = Keys::from_salted_password(mechanism, salted_password);
        Verifier {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: keys.stored_key,
            server_key: keys.server_key,
        }
    }

    /// With a fresh random 32-byte salt and [`Verifier::DEFAULT_ITERATIONS`].
    pub fn generate(mechanism: Mechanism, password: &str) -> Verifier {
        let salt: [u8; 32] = rand::random();
        Verifier::new(mechanism, password, &salt, Verifier::DEFAULT_ITERATIONS)
    }

    /// True if `password` is the one this verifier was made from.
    pub fn matches(&self, password: &str) -> bool {
        let other = Verifier::new(self.mechanism, password, &self.salt, self.iterations);
        // Both comparisons always run: no early exit on the first.
        let stored = constant_time_eq(&other.stored_key, &self.stored_key);
        let server = constant_time_eq(&other.server_key, &self.server_key);
        stored & server
    }
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// The keys derived from a salted password.
struct Keys {
    client_key: Vec<u8>,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
}

impl Keys {
    fn from_salted_password(mechanism: Mechanism, salted: &[u8]) -> Keys {
        let client_key = mechanism.hmac(salted, b"Client Key");
        let stored_key = mechanism.hash(&client_key);
        let server_key = mechanism.hmac(salted, b"Server Key");
        Keys {
            client_key,
            stored_key,
            server_key,
        }
    }
}

/// One remembered salted password.
struct CachedSalt {
    mechanism: Mechanism,
    salt: Vec<u8>,
    iterations: u32,
    salted_password: Vec<u8>,
}

/// A client's username and password, with the salted password cached per
/// (mechanism, salt, iterations) so that reconnecting does not pay PBKDF2 again.
///
/// Shared across connections (it is `Send + Sync`): wrap it in an [`Arc`].
pub struct ClientCredential {
    username: String,
    password: String,
    cache: Mutex<Vec<CachedSalt>>,
    /// How many times PBKDF2 ran for this credential (for tests).
    derivations: AtomicU64,
}

impl ClientCredential {
    /// A credential of `username` with `password`.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> ClientCredential {
        ClientCredential {
            username: username.into(),
            password: password.into(),
            cache: Mutex::new(Vec::new()),
            derivations: AtomicU64::new(0),
        }
    }

    /// The username.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The salted password for these parameters, from the cache or computed (and
    /// then cached; the oldest entry goes when the cache is full).
    fn salted_password(&self, mechanism: Mechanism, salt: &[u8], iterations: u32) -> Vec<u8> {
        let hit = |entry: &CachedSalt| {
            entry.mechanism == mechanism && entry.iterations == iterations && entry.salt == salt
        };
        if let Some(entry) = self.lock_cache().iter().find(|e| hit(e)) {
            return entry.salted_password.clone();
        }
        // Computed without holding the lock: a concurrent exchange at worst
        // computes the same value too.
        self.derivations.fetch_add(1, Ordering::Relaxed);
        let salted = mechanism.salted_password(&self.password, salt, iterations);
        let mut cache = self.lock_cache();
        if !cache.iter().any(hit) {
            if cache.len() >= CACHE_ENTRIES {
                cache.remove(0);
            }
            cache.push(CachedSalt {
                mechanism,
                salt: salt.to_vec(),
                iterations,
                salted_password: salted.clone(),
            });
        }
        salted
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, Vec<CachedSalt>> {
        // The cache holds no invariant a panicking holder could break.
        self.cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl fmt::Debug for ClientCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredential")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// Why a SCRAM exchange failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ScramError {
    /// A message does not follow the grammar of RFC 5802.
    #[error("malformed SCRAM message: {0}")]
    Malformed(String),
    /// The server has no verifier for the user.
    #[error("unknown user {0:?}")]
    UnknownUser(String),
    /// The client's proof does not verify: it does not know the password.
    #[error("wrong password for {0:?} (the client proof does not verify)")]
    BadProof(String),
    /// The nonce in a later message does not continue the client's.
    #[error("the nonce does not continue the client's")]
    NonceMismatch,
    /// The server's signature in server-final is wrong: it does not hold the
    /// user's verifier.
    #[error("the server did not prove it knows the credential (wrong server signature)")]
    ServerSignature,
    /// The server-final message was an error (`e=...`); client side.
    #[error("the server refused: {0}")]
    ServerError(String),
    /// A step was called twice, out of order, or after the exchange failed.
    #[error("SCRAM message out of order")]
    OutOfOrder,
    /// Something valid but not supported: channel binding, a mandatory
    /// extension, an authorization identity other than the user, a verifier of
    /// another mechanism, an iteration count out of range.
    #[error("{0}")]
    Unsupported(String),
}

fn malformed(what: impl Into<String>) -> ScramError {
    ScramError::Malformed(what.into())
}

/// Where a client is in its exchange.
enum ClientState {
    /// client-first sent; waiting for server-first.
    Started {
        gs2_header: String,
        client_first_bare: String,
        nonce: String,
    },
    /// client-final sent; waiting for server-final, which must carry this.
    SentFinal { server_signature: Vec<u8> },
    /// The server proved itself.
    Done,
    /// A step failed; the exchange is over.
    Failed,
}

impl ClientState {
    fn name(&self) -> &'static str {
        match self {
            ClientState::Started { .. } => "awaiting server-first",
            ClientState::SentFinal { .. } => "awaiting server-final",
            ClientState::Done => "done",
            ClientState::Failed => "failed",
        }
    }
}

/// Client side of one exchange: client-first -> server-first -> client-final
/// -> server-final.
pub struct ScramClient {
    mechanism: Mechanism,
    credential: Arc<ClientCredential>,
    state: ClientState,
}

impl ScramClient {
    /// Starts an exchange; returns the client-first message to send.
    pub fn start(
        mechanism: Mechanism,
        credential: Arc<ClientCredential>,
    ) -> (ScramClient, Vec<u8>) {
        ScramClient::start_with_nonce(mechanism, credential, &random_nonce())
    }

    /// Same with a given client nonce (for tests: RFC vectors). The nonce must be
    /// printable ASCII without `,`; a server refuses anything else.
    pub fn start_with_nonce(
        mechanism: Mechanism,
        credential: Arc<ClientCredential>,
        nonce: &str,
    ) -> (ScramClient, Vec<u8>) {
        let gs2_header = "n,,".to_string();
        let client_first_bare = format!("n={},r={nonce}", escape_username(credential.username()));
        let message = format!("{gs2_header}{client_first_bare}").into_bytes();
        let client = ScramClient {
            mechanism,
            credential,
            state: ClientState::Started {
                gs2_header,
                client_first_bare,
                nonce: nonce.to_string(),
            },
        };
        (client, message)
    }

    /// Takes server-first, returns client-final.
    pub fn server_first(&mut self, message: &[u8]) -> Result<Vec<u8>, ScramError> {
        let (gs2_header, client_first_bare, client_nonce) =
            match std::mem::replace(&mut self.state, ClientState::Failed) {
                ClientState::Started {
                    gs2_header,
                    client_first_bare,
                    nonce,
                } => (gs2_header, client_first_bare, nonce),
                other => return Err(self.out_of_order(other)),
            };
        let server_first = utf8(message, "server-first")?;
        let mut attrs = server_first.split(',');
        refuse_mandatory_extension(attrs.clone().next())?;
        let nonce = nonce_value(attribute(attrs.next(), 'r', "server-first")?)?;
        let salt = base64_value(attribute(attrs.next(), 's', "server-first")?, "salt")?;
        let iterations = iteration_count(attribute(attrs.next(), 'i', "server-first")?)?;
        check_extensions(attrs)?;
        if nonce.len() <= client_nonce.len() || !nonce.starts_with(client_nonce.as_str()) {
            return Err(ScramError::NonceMismatch);
        }
        if salt.is_empty() {
            return Err(malformed("server-first: empty salt"));
        }
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(ScramError::Unsupported(format!(
                "the server asks for {iterations} PBKDF2 iterations; \
                 syncline accepts {MIN_ITERATIONS} to {MAX_ITERATIONS}"
            )));
        }

        let salted = self
            .credential
            .salted_password(self.mechanism, &salt, iterations);
        let keys = Keys::from_salted_password(self.mechanism, &salted);
        let without_proof = format!("c={},r={nonce}", BASE64.encode(gs2_header.as_bytes()));
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let client_signature = self
            .mechanism
            .hmac(&keys.stored_key, auth_message.as_bytes());
        let proof = xor(&keys.client_key, &client_signature);
        let server_signature = self
            .mechanism
            .hmac(&keys.server_key, auth_message.as_bytes());
        self.state = ClientState::SentFinal { server_signature };
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Takes server-final; Ok only if the server proved it knows the verifier.
    pub fn server_final(&mut self, message: &[u8]) -> Result<(), ScramError> {
        let server_signature = match std::mem::replace(&mut self.state, ClientState::Failed) {
            ClientState::SentFinal { server_signature } => server_signature,
            other => return Err(self.out_of_order(other)),
        };
        let text = utf8(message, "server-final")?;
        let mut attrs = text.split(',');
        let first = attrs.next().unwrap_or_default();
        if let Some(error) = first.strip_prefix("e=") {
            return Err(ScramError::ServerError(error.to_string()));
        }
        let signature = base64_value(attribute(Some(first), 'v', "server-final")?, "verifier")?;
        check_extensions(attrs)?;
        if !constant_time_eq(&signature, &server_signature) {
            return Err(ScramError::ServerSignature);
        }
        self.state = ClientState::Done;
        Ok(())
    }

    /// OutOfOrder. A call out of order ends an exchange in progress; a completed
    /// one stays completed.
    fn out_of_order(&mut self, state: ClientState) -> ScramError {
        if matches!(state, ClientState::Done) {
            self.state = state;
        }
        ScramError::OutOfOrder
    }
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .field("username", &self.credential.username())
            .field("state", &self.state.name())
            .finish()
    }
}

/// What the server keeps between client-first and client-final.
struct Pending {
    username: String,
    verifier: Verifier,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

/// Where a server is in its exchange.
enum ServerState {
    /// Waiting for client-first.
    Initial,
    /// server-first sent; waiting for client-final.
    SentFirst(Box<Pending>),
    /// The client proved it knows the password of `username`.
    Done { username: String },
    /// A step failed; the exchange is over.
    Failed,
}

impl ServerState {
    fn name(&self) -> &'static str {
        match self {
            ServerState::Initial => "awaiting client-first",
            ServerState::SentFirst(_) => "awaiting client-final",
            ServerState::Done { .. } => "done",
            ServerState::Failed => "failed",
        }
    }
}

/// Server side of one exchange.
pub struct ScramServer {
    mechanism: Mechanism,
    nonce_part: String,
    state: ServerState,
}

impl ScramServer {
    /// A server for one exchange of `mechanism`, with a random nonce part.
    pub fn new(mechanism: Mechanism) -> ScramServer {
        ScramServer::with_nonce(mechanism, &random_nonce())
    }

    /// Same with a given server nonce part (for tests: RFC vectors).
    pub fn with_nonce(mechanism: Mechanism, server_nonce_part: &str) -> ScramServer {
        ScramServer {
            mechanism,
            nonce_part: server_nonce_part.to_string(),
            state: ServerState::Initial,
        }
    }

    /// Takes client-first; `lookup` finds the verifier for the username (None:
    /// unknown user). Returns server-first.
    ///
    /// Refuses a malformed message, an unknown user, a verifier of another
    /// mechanism, channel binding (a `p=` GS2 header; `y` and `n` are accepted),
    /// a mandatory extension and an authzid other than the username.
    pub fn client_first(
        &mut self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<Verifier>,
    ) -> Result<Vec<u8>, ScramError> {
        match std::mem::replace(&mut self.state, ServerState::Failed) {
            ServerState::Initial => {}
            other => return Err(self.out_of_order(other)),
        }
        let text = utf8(message, "client-first")?;

        // gs2-header = gs2-cbind-flag "," [ authzid ] ","
        let (flag, rest) = text
            .split_once(',')
            .ok_or_else(|| malformed("client-first: no GS2 header"))?;
        match flag {
            "n" | "y" => {}
            _ if flag.starts_with("p=") => {
                return Err(ScramError::Unsupported(format!(
                    "the client asks for channel binding ({flag}); syncline's {} has none",
                    self.mechanism
                )))
            }
            _ => return Err(malformed(format!("client-first: bad GS2 flag {flag:?}"))),
        }
        let (authzid, client_first_bare) = rest
            .split_once(',')
            .ok_or_else(|| malformed("client-first: GS2 header not terminated"))?;
        let authzid = match authzid {
            "" => None,
            _ => {
                let name = authzid
                    .strip_prefix("a=")
                    .ok_or_else(|| malformed("client-first: bad authzid"))?;
                Some(unescape_username(name)?)
            }
        };
        let gs2_header = &text[..text.len() - client_first_bare.len()];

        let mut attrs = client_first_bare.split(',');
        refuse_mandatory_extension(attrs.clone().next())?;
        let username = unescape_username(attribute(attrs.next(), 'n', "client-first")?)?;
        let client_nonce = nonce_value(attribute(attrs.next(), 'r', "client-first")?)?;
        check_extensions(attrs)?;
        if let Some(authzid) = authzid {
            if authzid != username {
                return Err(ScramError::Unsupported(format!(
                    "user {username:?} asks to act as {authzid:?}; \
                     syncline supports no authorization identity other than the user"
                )));
            }
        }

        let verifier =
            lookup(&username).ok_or_else(|| ScramError::UnknownUser(username.clone()))?;
        if verifier.mechanism != self.mechanism {
            return Err(ScramError::Unsupported(format!(
                "user {username:?} has a {} credential, not {}",
                verifier.mechanism, self.mechanism
            )));
        }
        let nonce = format!("{client_nonce}{}", self.nonce_part);
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&verifier.salt),
            verifier.iterations
        );
        let reply = server_first.clone().into_bytes();
        self.state = ServerState::SentFirst(Box::new(Pending {
            username,
            verifier,
            gs2_header: gs2_header.to_string(),
            client_first_bare: client_first_bare.to_string(),
            server_first,
            nonce,
        }));
        Ok(reply)
    }

    /// Takes client-final, checks the nonce, the channel-binding echo (`biws`
    /// for `n,,`) and the proof (in constant time). Returns the server-final
    /// message (`v=...`) on success.
    pub fn client_final(&mut self, message: &[u8]) -> Result<Vec<u8>, ScramError> {
        let pending = match std::mem::replace(&mut self.state, ServerState::Failed) {
            ServerState::SentFirst(pending) => pending,
            other => return Err(self.out_of_order(other)),
        };
        let text = utf8(message, "client-final")?;
        // client-final = channel-binding "," nonce ["," extensions] "," proof
        let (without_proof, proof) = text
            .rsplit_once(',')
            .ok_or_else(|| malformed("client-final: too few attributes"))?;
        let proof = base64_value(attribute(Some(proof), 'p', "client-final")?, "proof")?;
        let mut attrs = without_proof.split(',');
        let binding = base64_value(
            attribute(attrs.next(), 'c', "client-final")?,
            "channel binding",
        )?;
        let nonce = nonce_value(attribute(attrs.next(), 'r', "client-final")?)?;
        check_extensions(attrs)?;
        if binding != pending.gs2_header.as_bytes() {
            return Err(malformed(
                "client-final: the channel binding does not echo the GS2 header of client-first",
            ));
        }
        // The nonce must end with the one server-first gave, as Kafka's
        // brokers check it: librdkafka sends the client's nonce in front of
        // the whole combined nonce again (and the proof covers what it sent).
        if !nonce.ends_with(&pending.nonce) {
            return Err(ScramError::NonceMismatch);
        }
        let mechanism = self.mechanism;
        if proof.len() != mechanism.output_len() {
            return Err(malformed(format!(
                "client-final: the proof has {} bytes, {mechanism} needs {}",
                proof.len(),
                mechanism.output_len()
            )));
        }

        let auth_message = format!(
            "{},{},{without_proof}",
            pending.client_first_bare, pending.server_first
        );
        let verifier = &pending.verifier;
        let client_signature = mechanism.hmac(&verifier.stored_key, auth_message.as_bytes());
        let client_key = xor(&proof, &client_signature);
        if !constant_time_eq(&mechanism.hash(&client_key), &verifier.stored_key) {
            return Err(ScramError::BadProof(pending.username.clone()));
        }
        let server_signature = mechanism.hmac(&verifier.server_key, auth_message.as_bytes());
        self.state = ServerState::Done {
            username: pending.username,
        };
        Ok(format!("v={}", BASE64.encode(server_signature)).into_bytes())
    }

    /// The authenticated username once [`ScramServer::client_final`] succeeded.
    pub fn username(&self) -> Option<&str> {
        match &self.state {
            ServerState::Done { username } => Some(username),
            _ => None,
        }
    }

    /// OutOfOrder. A call out of order ends an exchange in progress; a completed
    /// one stays completed (and [`ScramServer::username`] keeps answering).
    fn out_of_order(&mut self, state: ServerState) -> ScramError {
        if matches!(state, ServerState::Done { .. }) {
            self.state = state;
        }
        ScramError::OutOfOrder
    }
}

impl fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("ScramServer");
        debug
            .field("mechanism", &self.mechanism)
            .field("state", &self.state.name());
        match &self.state {
            ServerState::SentFirst(pending) => debug.field("username", &pending.username),
            ServerState::Done { username } => debug.field("username", username),
            _ => &mut debug,
        };
        debug.finish()
    }
}

/// 24 random bytes, base64: printable and without `,`.
fn random_nonce() -> String {
    let bytes: [u8; NONCE_BYTES] = rand::random();
    BASE64.encode(bytes)
}

fn utf8<'a>(message: &'a [u8], what: &str) -> Result<&'a str, ScramError> {
    let text = std::str::from_utf8(message).map_err(|_| malformed(format!("{what}: not UTF-8")))?;
    if text.contains('\0') {
        return Err(malformed(format!("{what}: contains NUL")));
    }
    Ok(text)
}

/// The value of `part`, which must be the attribute `key=VALUE` with a
/// non-empty value.
fn attribute<'a>(part: Option<&'a str>, key: char, what: &str) -> Result<&'a str, ScramError> {
    let part = part.ok_or_else(|| malformed(format!("{what}: missing attribute {key}=")))?;
    let mut chars = part.chars();
    match (chars.next(), chars.next()) {
        (Some(k), Some('=')) if k == key => {}
        _ => {
            return Err(malformed(format!(
                "{what}: expected attribute {key}= where it has {:?}",
                truncated(part)
            )))
        }
    }
    let value = &part[2..];
    if value.is_empty() {
        return Err(malformed(format!("{what}: empty attribute {key}=")));
    }
    Ok(value)
}

/// Refuses a mandatory extension (`m=`), which RFC 5802 reserves and no one
/// defines: a client or server asking for one cannot be served.
fn refuse_mandatory_extension(first: Option<&str>) -> Result<(), ScramError> {
    match first {
        Some(part) if part.starts_with("m=") => Err(ScramError::Unsupported(
            "the peer requires a mandatory SCRAM extension (m=), which syncline does not know"
                .to_string(),
        )),
        _ => Ok(()),
    }
}

/// Optional extensions after the mandatory attributes are tolerated (RFC 5802
/// section 5.1) as long as they look like attributes: `KEY=VALUE` with an
/// alphanumeric key (Kafka uses multi-letter keys, such as `tokenauth`).
fn check_extensions<'a>(parts: impl Iterator<Item = &'a str>) -> Result<(), ScramError> {
    for part in parts {
        let Some((key, _)) = part.split_once('=') else {
            return Err(malformed(format!("bad extension {:?}", truncated(part))));
        };
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(malformed(format!("bad extension {:?}", truncated(part))));
        }
        if key == "m" {
            return Err(ScramError::Unsupported(
                "the peer requires a mandatory SCRAM extension (m=), which syncline does not know"
                    .to_string(),
            ));
        }
    }
    Ok(())
}

/// A nonce: printable ASCII except `,` (RFC 5802 `printable`).
fn nonce_value(value: &str) -> Result<String, ScramError> {
    if value
        .bytes()
        .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
    {
        Ok(value.to_string())
    } else {
        Err(malformed(
            "the nonce has characters other than printable ASCII",
        ))
    }
}

fn base64_value(value: &str, what: &str) -> Result<Vec<u8>, ScramError> {
    BASE64
        .decode(value)
        .map_err(|e| malformed(format!("the {what} is not base64: {e}")))
}

/// RFC 5802 `posit-number`: decimal digits without a leading zero.
fn iteration_count(value: &str) -> Result<u32, ScramError> {
    if !value.bytes().all(|b| b.is_ascii_digit()) || value.starts_with('0') {
        return Err(malformed(format!(
            "server-first: iteration count {:?} is not a positive number",
            truncated(value)
        )));
    }
    value.parse().map_err(|_| {
        ScramError::Unsupported(format!(
            "the server asks for {} PBKDF2 iterations; syncline accepts {MIN_ITERATIONS} to {MAX_ITERATIONS}",
            truncated(value)
        ))
    })
}

/// SCRAM's `saslname`: `,` as `=2C` and `=` as `=3D`.
fn escape_username(username: &str) -> String {
    username.replace('=', "=3D").replace(',', "=2C")
}

/// The inverse of [`escape_username`]; refuses `=` not starting `=2C` or `=3D`,
/// and an empty name.
fn unescape_username(escaped: &str) -> Result<String, ScramError> {
    if escaped.is_empty() {
        return Err(malformed("empty username"));
    }
    let mut name = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find('=') {
        name.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3);
        match escape {
            Some("=2C") => name.push(','),
            Some("=3D") => name.push('='),
            _ => return Err(malformed("username: '=' not followed by 2C or 3D")),
        }
        rest = &rest[at + 3..];
    }
    name.push_str(rest);
    Ok(name)
}

/// At most 40 characters of `s`, for error messages.
fn truncated(s: &str) -> &str {
    match s.char_indices().nth(40) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// Equality whose time does not depend on where the inputs differ (the lengths
/// are not secret): `subtle`'s.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RFC_CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const RFC_SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";

    fn rfc_verifier(mechanism: Mechanism) -> Verifier {
        let salt = BASE64.decode(RFC_SALT).unwrap();
        Verifier::new(mechanism, "pencil", &salt, 4096)
    }

    fn credential(username: &str, password: &str) -> Arc<ClientCredential> {
        Arc::new(ClientCredential::new(username, password))
    }

    /// Runs the RFC 7677 exchange (with `mechanism`) and returns the four messages.
    fn rfc_exchange(mechanism: Mechanism) -> [String; 4] {
        let verifier = rfc_verifier(mechanism);
        let (mut client, client_first) = ScramClient::start_with_nonce(
            mechanism,
            credential("user", "pencil"),
            RFC_CLIENT_NONCE,
        );
        let mut server = ScramServer::with_nonce(mechanism, RFC_SERVER_NONCE);
        let server_first = server
            .client_first(&client_first, |name| {
                (name == "user").then(|| verifier.clone())
            })
            .unwrap();
        let client_final = client.server_first(&server_first).unwrap();
        let server_final = server.client_final(&client_final).unwrap();
        client.server_final(&server_final).unwrap();
        assert_eq!(server.username(), Some("user"));
        [client_first, server_first, client_final, server_final]
            .map(|m| String::from_utf8(m).unwrap())
    }

    /// A client and a server whose exchange stopped after server-first.
    fn after_server_first(
        mechanism: Mechanism,
        verifier: &Verifier,
        password: &str,
    ) -> (ScramClient, ScramServer, Vec<u8>) {
        let (client, client_first) = ScramClient::start(mechanism, credential("user", password));
        let mut server = ScramServer::new(mechanism);
        let server_first = server
            .client_first(&client_first, |_| Some(verifier.clone()))
            .unwrap();
        (client, server, server_first)
    }

    #[test]
    fn mechanism_names() {
        assert_eq!(Mechanism::ScramSha256.name(), "SCRAM-SHA-256");
        assert_eq!(Mechanism::ScramSha512.name(), "SCRAM-SHA-512");
        for mechanism in Mechanism::ALL {
            assert_eq!(Mechanism::from_name(mechanism.name()), Some(mechanism));
            assert_eq!(mechanism.to_string(), mechanism.name());
        }
        assert_eq!(Mechanism::from_name("scram-sha-256"), None);
        assert_eq!(Mechanism::from_name("SCRAM-SHA-1"), None);
        assert_eq!(Mechanism::from_name("PLAIN"), None);
        assert_eq!(Mechanism::from_name(""), None);
    }

    #[test]
    fn rfc7677_sha256_vector() {
        let [client_first, server_first, client_final, server_final] =
            rfc_exchange(Mechanism::ScramSha256);
        assert_eq!(client_first, "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        assert_eq!(
            server_first,
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        assert_eq!(
            client_final,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(
            server_final,
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }

    /// The RFC 7677 exchange with SHA-512, expected values computed independently
    /// (Python's hashlib and hmac).
    #[test]
    fn sha512_vector() {
        let [_, _, client_final, server_final] = rfc_exchange(Mechanism::ScramSha512);
        assert_eq!(
            client_final,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=gMGXRcevScNtxZ6/8lQYpGtnsNAc3mGcmNomv+xnoOMw+3R2xNJdMNnzMlTN8PPC6wdp6dybEmDYXYTxwnYPJQ=="
        );
        assert_eq!(
            server_final,
            "v=ZQnYEgWQMFmmsM8aQMF0nDDCy/AgCzkwk8CmMZYcMg0vSVlKDanekLtifDSeVGT4+5ZxXnJq199RVG2rR7N7Zw=="
        );
    }

    #[test]
    fn round_trip_every_mechanism() {
        for mechanism in Mechanism::ALL {
            let verifier = Verifier::generate(mechanism, "s3cret");
            assert_eq!(verifier.salt.len(), 32);
            assert_eq!(verifier.iterations, Verifier::DEFAULT_ITERATIONS);
            assert_eq!(verifier.stored_key.len(), mechanism.output_len());
            assert_eq!(verifier.server_key.len(), mechanism.output_len());
            let (mut client, client_first) =
                ScramClient::start(mechanism, credential("broker-1", "s3cret"));
            let mut server = ScramServer::new(mechanism);
            let server_first = server
                .client_first(&client_first, |name| {
                    (name == "broker-1").then(|| verifier.clone())
                })
                .unwrap();
            let client_final = client.server_first(&server_first).unwrap();
            assert_eq!(server.username(), None);
            let server_final = server.client_final(&client_final).unwrap();
            client.server_final(&server_final).unwrap();
            assert_eq!(server.username(), Some("broker-1"));
        }
    }

    #[test]
    fn nonces_are_random_and_printable() {
        let (_, a) = ScramClient::start(Mechanism::ScramSha256, credential("u", "p"));
        let (_, b) = ScramClient::start(Mechanism::ScramSha256, credential("u", "p"));
        assert_ne!(a, b);
        let a = String::from_utf8(a).unwrap();
        let nonce = a.strip_prefix("n,,n=u,r=").unwrap();
        assert_eq!(nonce.len(), 32);
        assert!(nonce_value(nonce).is_ok());
    }

    #[test]
    fn usernames_are_escaped() {
        let name = "a,b=c=2C";
        let verifier = Verifier::generate(Mechanism::ScramSha256, "pw");
        let (mut client, client_first) =
            ScramClient::start_with_nonce(Mechanism::ScramSha256, credential(name, "pw"), "abc");
        assert_eq!(client_first, b"n,,n=a=2Cb=3Dc=3D2C,r=abc");
        let mut server = ScramServer::new(Mechanism::ScramSha256);
        let mut looked_up = String::new();
        let server_first = server
            .client_first(&client_first, |n| {
                looked_up = n.to_string();
                Some(verifier.clone())
            })
            .unwrap();
        assert_eq!(looked_up, name);
        let server_final = server
            .client_final(&client.server_first(&server_first).unwrap())
            .unwrap();
        client.server_final(&server_final).unwrap();
        assert_eq!(server.username(), Some(name));

        assert!(unescape_username("a=2").is_err());
        assert!(unescape_username("a=").is_err());
        assert!(unescape_username("a=2c").is_err());
        assert!(unescape_username("=41").is_err());
        assert_eq!(unescape_username("=3D=2C").unwrap(), "=,");
    }

    #[test]
    fn keys_are_equal_only_when_every_byte_and_the_length_are() {
        let cases: [(&[u8], &[u8], bool); 5] = [
            (b"", b"", true),
            (b"stored key", b"stored key", true),
            (b"stored key", b"stored kez", false),
            (b"Stored key", b"stored key", false),
            (b"stored key", b"stored ke", false),
        ];
        for (a, b, equal) in cases {
            assert_eq!(constant_time_eq(a, b), equal, "{a:?} {b:?}");
        }
    }

    #[test]
    fn wrong_password_is_refused_both_ways() {
        let mechanism = Mechanism::ScramSha256;
        let verifier = Verifier::generate(mechanism, "right");
        let (mut client, mut server, server_first) =
            after_server_first(mechanism, &verifier, "wrong");
        let client_final = client.server_first(&server_first).unwrap();
        assert_eq!(
            server.client_final(&client_final),
            Err(ScramError::BadProof("user".to_string()))
        );
        assert_eq!(server.username(), None);
        // Even the signature of a server holding the real verifier does not
        // verify for a client with the wrong password.
        let client_final = String::from_utf8(client_final).unwrap();
        let (without_proof, _) = client_final.rsplit_once(',').unwrap();
        // Reconstruct client-first-bare from server-first's nonce (the client's
        // part is everything before the server's 32-character part).
        let server_first = String::from_utf8(server_first).unwrap();
        let nonce = server_first
            .strip_prefix("r=")
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        let client_nonce = &nonce[..nonce.len() - 32];
        let auth_message = format!("n=user,r={client_nonce},{server_first},{without_proof}");
        let real = mechanism.hmac(&verifier.server_key, auth_message.as_bytes());
        let server_final = format!("v={}", BASE64.encode(real));
        assert_eq!(
            client.server_final(server_final.as_bytes()),
            Err(ScramError::ServerSignature)
        );
    }

    #[test]
    fn tampered_server_final_is_refused() {
        let mechanism = Mechanism::ScramSha512;
        let verifier = Verifier::generate(mechanism, "pw");
        let (mut client, mut server, server_first) = after_server_first(mechanism, &verifier, "pw");
        let client_final = client.server_first(&server_first).unwrap();
        let mut server_final = server.client_final(&client_final).unwrap();
        // Flip one base64 character of the signature (still valid base64).
        let at = 5;
        server_final[at] = if server_final[at] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            client.server_final(&server_final),
            Err(ScramError::ServerSignature)
        );
        // The exchange is over.
        assert_eq!(
            client.server_final(&server_final),
            Err(ScramError::OutOfOrder)
        );
    }

    #[test]
    fn server_error_reaches_the_client() {
        let mechanism = Mechanism::ScramSha256;
        let verifier = Verifier::generate(mechanism, "pw");
        let (mut client, _, server_first) = after_server_first(mechanism, &verifier, "pw");
        client.server_first(&server_first).unwrap();
        assert_eq!(
            client.server_final(b"e=invalid-proof"),
            Err(ScramError::ServerError("invalid-proof".to_string()))
        );
    }

    #[test]
    fn a_server_without_the_verifier_cannot_impersonate() {
        // A forged server with a verifier of another password (same salt) fails
        // the client's check.
        let mechanism = Mechanism::ScramSha256;
        let real = Verifier::generate(mechanism, "pw");
        let forged = Verifier::new(mechanism, "guess", &real.salt, real.iterations);
        let (mut client, client_first) = ScramClient::start(mechanism, credential("user", "pw"));
        let mut server = ScramServer::new(mechanism);
        let server_first = server
            .client_first(&client_first, |_| Some(forged))
            .unwrap();
        let client_final = client.server_first(&server_first).unwrap();
        assert!(matches!(
            server.client_final(&client_final),
            Err(ScramError::BadProof(_))
        ));
    }

    #[test]
    fn unknown_user() {
        let (_, client_first) =
            ScramClient::start(Mechanism::ScramSha256, credential("nobody", "pw"));
        let mut server = ScramServer::new(Mechanism::ScramSha256);
        assert_eq!(
            server.client_first(&client_first, |_| None),
            Err(ScramError::UnknownUser("nobody".to_string()))
        );
        assert_eq!(server.username(), None);
        // The exchange is over.
        assert_eq!(
            server.client_final(b"c=biws,r=x,p=AAAA"),
            Err(ScramError::OutOfOrder)
        );
    }

    #[test]
    fn verifier_of_another_mechanism_is_refused() {
        let verifier = Verifier::generate(Mechanism::ScramSha256, "pw");
        let (_, client_first) =
            ScramClient::start(Mechanism::ScramSha512, credential("user", "pw"));
        let mut server = ScramServer::new(Mechanism::ScramSha512);
        let error = server
            .client_first(&client_first, |_| Some(verifier))
            .unwrap_err();
        assert!(
            matches!(&error, ScramError::Unsupported(m) if m.contains("SCRAM-SHA-256")),
            "{error}"
        );
    }

    #[test]
    fn gs2_headers() {
        let mechanism = Mechanism::ScramSha256;
        let verifier = Verifier::generate(mechanism, "pw");
        let first = |message: &str| {
            let mut server = ScramServer::with_nonce(mechanism, "S");
            let result = server.client_first(message.as_bytes(), |_| Some(verifier.clone()));
            (server, result)
        };
        assert!(first("n,,n=user,r=abc").1.is_ok());
        assert!(first("y,,n=user,r=abc").1.is_ok());
        assert!(first("n,a=user,n=user,r=abc").1.is_ok());
        assert!(matches!(
            first("p=tls-unique,,n=user,r=abc").1,
            Err(ScramError::Unsupported(_))
        ));
        assert!(matches!(
            first("n,a=admin,n=user,r=abc").1,
            Err(ScramError::Unsupported(_))
        ));
        assert!(matches!(
            first("x,,n=user,r=abc").1,
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            first("n,b=user,n=user,r=abc").1,
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            first("n,,m=ext,n=user,r=abc").1,
            Err(ScramError::Unsupported(_))
        ));
        assert!(matches!(
            first("n,,n=user,r=abc,m=ext").1,
            Err(ScramError::Unsupported(_))
        ));
        assert!(matches!(
            first("n,,n=user,r=a,c").1,
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            first("n,,n=user,r=abc,=x").1,
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            first("n,,n=user").1,
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            first("n,,r=abc,n=user").1,
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            first("n,,n=,r=abc").1,
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            first("n,,n=user,r=").1,
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            first("n,,n=user,r=a\u{e9}").1,
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            first("n,,n=us\0er,r=abc").1,
            Err(ScramError::Malformed(_))
        ));

        // The channel binding must echo the header actually sent: "y,," is "eSws".
        let client_final = |server: &mut ScramServer, binding: &str| {
            server
                .client_final(format!("c={binding},r=abcS,p={}", BASE64.encode([0; 32])).as_bytes())
        };
        let (mut server, _) = first("y,,n=user,r=abc");
        assert!(matches!(
            client_final(&mut server, "eSws"),
            Err(ScramError::BadProof(_))
        ));
        let (mut server, _) = first("y,,n=user,r=abc");
        assert!(matches!(
            client_final(&mut server, "biws"),
            Err(ScramError::Malformed(_))
        ));
        let (mut server, _) = first("n,a=user,n=user,r=abc");
        let header = BASE64.encode("n,a=user,");
        assert!(matches!(
            client_final(&mut server, &header),
            Err(ScramError::BadProof(_))
        ));
    }

    #[test]
    fn extensions_are_tolerated() {
        let mechanism = Mechanism::ScramSha256;
        let verifier = rfc_verifier(mechanism);
        let (mut client, _) = ScramClient::start_with_nonce(
            mechanism,
            credential("user", "pencil"),
            RFC_CLIENT_NONCE,
        );
        let mut server = ScramServer::with_nonce(mechanism, RFC_SERVER_NONCE);
        server
            .client_first(
                b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO,tokenauth=true,x=1",
                |_| Some(verifier.clone()),
            )
            .unwrap();
        // Server-first with an extension: the client still answers, and the
        // extension is part of the AuthMessage. (The server's copy has none, so
        // its proof check fails: this only tests the client's parsing.)
        let client_final = client
            .server_first(
                b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,x=y",
            )
            .unwrap();
        let client_final = String::from_utf8(client_final).unwrap();
        // Client-final with an extension before the proof.
        let (without_proof, proof) = client_final.rsplit_once(',').unwrap();
        let with_extension = format!("{without_proof},x=1,{proof}");
        assert!(matches!(
            server.client_final(with_extension.as_bytes()),
            Err(ScramError::BadProof(_))
        ));

        // A server-final with an extension after the signature.
        let [_, server_first, _, server_final] = rfc_exchange(mechanism);
        let (mut client, _) = ScramClient::start_with_nonce(
            mechanism,
            credential("user", "pencil"),
            RFC_CLIENT_NONCE,
        );
        client.server_first(server_first.as_bytes()).unwrap();
        client
            .server_final(format!("{server_final},x=1").as_bytes())
            .unwrap();

        // A mandatory extension in server-first is refused.
        let (mut client, _) = ScramClient::start_with_nonce(
            mechanism,
            credential("user", "pencil"),
            RFC_CLIENT_NONCE,
        );
        assert!(matches!(
            client.server_first(format!("m=x,{server_first}").as_bytes()),
            Err(ScramError::Unsupported(_))
        ));
    }

    /// librdkafka's client-final repeats its own nonce before the combined
    /// one; Kafka's brokers accept a nonce that ends with theirs, and so does
    /// this server. One that does not end with it is still refused.
    #[test]
    fn server_accepts_librdkafkas_doubled_client_nonce() {
        let mechanism = Mechanism::ScramSha512;
        let verifier = Verifier::new(mechanism, "pencil", b"saltsaltsaltsalt", 4096);
        let final_with = |nonce_of: &dyn Fn(&str) -> String| {
            let mut server = ScramServer::with_nonce(mechanism, "SRV");
            let first = server
                .client_first(b"n,,n=user,r=abc", |_| Some(verifier.clone()))
                .unwrap();
            let server_first = String::from_utf8(first).unwrap();
            let combined = server_first
                .strip_prefix("r=")
                .and_then(|r| r.split(',').next())
                .unwrap()
                .to_string();
            assert_eq!(combined, "abcSRV");
            let without_proof = format!("c=biws,r={}", nonce_of(&combined));
            let salted = mechanism.salted_password("pencil", b"saltsaltsaltsalt", 4096);
            let keys = Keys::from_salted_password(mechanism, &salted);
            let auth_message = format!("n=user,r=abc,{server_first},{without_proof}");
            let signature = mechanism.hmac(&keys.stored_key, auth_message.as_bytes());
            let proof = BASE64.encode(xor(&keys.client_key, &signature));
            server.client_final(format!("{without_proof},p={proof}").as_bytes())
        };
        assert!(final_with(&|n| n.to_string()).is_ok(), "RFC 5802's nonce");
        assert!(final_with(&|n| format!("abc{n}")).is_ok(), "librdkafka's");
        assert_eq!(
            final_with(&|n| format!("{n}x")),
            Err(ScramError::NonceMismatch)
        );
        assert_eq!(
            final_with(&|_| "abc".to_string()),
            Err(ScramError::NonceMismatch)
        );
    }

    #[test]
    fn client_checks_server_first() {
        let mechanism = Mechanism::ScramSha256;
        let attempt = |message: &str| {
            let (mut client, _) =
                ScramClient::start_with_nonce(mechanism, credential("user", "pencil"), "abc");
            client.server_first(message.as_bytes())
        };
        assert!(attempt("r=abcdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096").is_ok());
        // (MAX_ITERATIONS itself is accepted too, but costs seconds of PBKDF2.)
        assert!(attempt("r=abcdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4097").is_ok());
        // The nonce must extend the client's.
        assert_eq!(
            attempt("r=abc,s=AAAA,i=4096"),
            Err(ScramError::NonceMismatch)
        );
        assert_eq!(
            attempt("r=xbcdef,s=AAAA,i=4096"),
            Err(ScramError::NonceMismatch)
        );
        assert_eq!(
            attempt("r=ab,s=AAAA,i=4096"),
            Err(ScramError::NonceMismatch)
        );
        // Iterations: too few, too many, not a number.
        for count in [
            "4095",
            "1",
            "1000001",
            "4294967295",
            "4294967296",
            "99999999999999999999",
        ] {
            let error = attempt(&format!("r=abcdef,s=AAAA,i={count}")).unwrap_err();
            assert!(
                matches!(&error, ScramError::Unsupported(m) if m.contains("iterations")),
                "{count}: {error}"
            );
        }
        for count in ["", "0", "04096", "-4096", "+4096", " 4096", "4096 ", "4k"] {
            assert!(
                matches!(
                    attempt(&format!("r=abcdef,s=AAAA,i={count}")),
                    Err(ScramError::Malformed(_))
                ),
                "{count:?}"
            );
        }
        // Salt.
        assert!(matches!(
            attempt("r=abcdef,s=,i=4096"),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            attempt("r=abcdef,s=!!!!,i=4096"),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            attempt("r=abcdef,s=AAA,i=4096"),
            Err(ScramError::Malformed(_))
        ));
        // Order and presence of attributes.
        assert!(matches!(
            attempt("s=AAAA,r=abcdef,i=4096"),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            attempt("r=abcdef,s=AAAA"),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            attempt("e=other-error"),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(attempt(""), Err(ScramError::Malformed(_))));
    }

    #[test]
    fn client_checks_server_final() {
        let [_, server_first, _, _] = rfc_exchange(Mechanism::ScramSha256);
        for bad in [
            "",
            "v=",
            "v=!!!",
            "v=AAAA",
            "x=AAAA",
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4",
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=,bad",
        ] {
            let (mut client, _) = ScramClient::start_with_nonce(
                Mechanism::ScramSha256,
                credential("user", "pencil"),
                RFC_CLIENT_NONCE,
            );
            client.server_first(server_first.as_bytes()).unwrap();
            assert!(client.server_final(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn server_checks_client_final() {
        let [client_first, _, client_final, _] = rfc_exchange(Mechanism::ScramSha256);
        let verifier = rfc_verifier(Mechanism::ScramSha256);
        let proof = client_final.rsplit_once(',').unwrap().1;
        let nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let attempt = |message: &str| {
            let mut server = ScramServer::with_nonce(Mechanism::ScramSha256, RFC_SERVER_NONCE);
            server
                .client_first(client_first.as_bytes(), |_| Some(verifier.clone()))
                .unwrap();
            let result = server.client_final(message.as_bytes());
            if result.is_err() {
                assert_eq!(server.username(), None);
            }
            result
        };
        assert!(attempt(&client_final).is_ok());
        assert_eq!(
            attempt(&format!("c=biws,r={nonce}x,{proof}")),
            Err(ScramError::NonceMismatch)
        );
        assert_eq!(
            attempt(&format!("c=biws,r=rOprNGfwEbeRWgbNEkqO,{proof}")),
            Err(ScramError::NonceMismatch)
        );
        assert!(matches!(
            attempt(&format!("c=eSws,r={nonce},{proof}")),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            attempt(&format!("c=biws,r={nonce}")),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            attempt(&format!("r={nonce},{proof}")),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            attempt(&format!("c=biws,r={nonce},p=AAAA")),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            attempt(&format!("c=biws,r={nonce},p=")),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            attempt(&format!("{proof},c=biws,r={nonce}")),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            attempt(&format!("c=biws,r={nonce},m=x,{proof}")),
            Err(ScramError::Unsupported(_))
        ));
        // A proof of the right length but wrong.
        let wrong = format!("c=biws,r={nonce},p={}", BASE64.encode([7u8; 32]));
        assert_eq!(
            attempt(&wrong),
            Err(ScramError::BadProof("user".to_string()))
        );
    }

    #[test]
    fn out_of_order_calls() {
        let mechanism = Mechanism::ScramSha256;
        let verifier = rfc_verifier(mechanism);
        let [client_first, server_first, client_final, server_final] = rfc_exchange(mechanism);

        // Client: server-final before server-first; then the exchange is over.
        let (mut client, _) = ScramClient::start_with_nonce(
            mechanism,
            credential("user", "pencil"),
            RFC_CLIENT_NONCE,
        );
        assert_eq!(
            client.server_final(server_final.as_bytes()),
            Err(ScramError::OutOfOrder)
        );
        // Client: server-first twice; and any call after completion.
        let (mut client, _) = ScramClient::start_with_nonce(
            mechanism,
            credential("user", "pencil"),
            RFC_CLIENT_NONCE,
        );
        client.server_first(server_first.as_bytes()).unwrap();
        assert_eq!(
            client.server_first(server_first.as_bytes()),
            Err(ScramError::OutOfOrder)
        );
        let (mut client, _) = ScramClient::start_with_nonce(
            mechanism,
            credential("user", "pencil"),
            RFC_CLIENT_NONCE,
        );
        client.server_first(server_first.as_bytes()).unwrap();
        client.server_final(server_final.as_bytes()).unwrap();
        assert_eq!(
            client.server_final(server_final.as_bytes()),
            Err(ScramError::OutOfOrder)
        );
        assert_eq!(
            client.server_first(server_first.as_bytes()),
            Err(ScramError::OutOfOrder)
        );

        // Server: client-final first.
        let mut server = ScramServer::with_nonce(mechanism, RFC_SERVER_NONCE);
        assert_eq!(
            server.client_final(client_final.as_bytes()),
            Err(ScramError::OutOfOrder)
        );
        // Server: client-first twice ends the exchange.
        let mut server = ScramServer::with_nonce(mechanism, RFC_SERVER_NONCE);
        server
            .client_first(client_first.as_bytes(), |_| Some(verifier.clone()))
            .unwrap();
        assert_eq!(
            server.client_first(client_first.as_bytes(), |_| Some(verifier.clone())),
            Err(ScramError::OutOfOrder)
        );
        assert_eq!(
            server.client_final(client_final.as_bytes()),
            Err(ScramError::OutOfOrder)
        );
        // Server: after completion, calls are refused and the username stays.
        let mut server = ScramServer::with_nonce(mechanism, RFC_SERVER_NONCE);
        server
            .client_first(client_first.as_bytes(), |_| Some(verifier.clone()))
            .unwrap();
        server.client_final(client_final.as_bytes()).unwrap();
        assert_eq!(
            server.client_final(client_final.as_bytes()),
            Err(ScramError::OutOfOrder)
        );
        assert_eq!(
            server.client_first(client_first.as_bytes(), |_| Some(verifier.clone())),
            Err(ScramError::OutOfOrder)
        );
        assert_eq!(server.username(), Some("user"));
        // Server: a failed client-final ends the exchange.
        let mut server = ScramServer::with_nonce(mechanism, RFC_SERVER_NONCE);
        server
            .client_first(client_first.as_bytes(), |_| Some(verifier.clone()))
            .unwrap();
        assert!(server.client_final(b"garbage").is_err());
        assert_eq!(
            server.client_final(client_final.as_bytes()),
            Err(ScramError::OutOfOrder)
        );
        assert_eq!(server.username(), None);
    }

    #[test]
    fn truncated_and_garbage_inputs() {
        let mechanism = Mechanism::ScramSha256;
        let verifier = rfc_verifier(mechanism);
        let [client_first, server_first, client_final, server_final] = rfc_exchange(mechanism);
        let garbage: [&[u8]; 5] = [b"", b",", b",,,", b"\xff\xfe", b"n,,n=user,r=\xff"];

        // client-first: prefixes may still be valid (a shorter nonce), but none panics.
        for end in 0..=client_first.len() {
            let mut server = ScramServer::with_nonce(mechanism, RFC_SERVER_NONCE);
            let _ =
                server.client_first(&client_first.as_bytes()[..end], |_| Some(verifier.clone()));
        }
        for input in garbage {
            let mut server = ScramServer::new(mechanism);
            assert!(server
                .client_first(input, |_| Some(verifier.clone()))
                .is_err());
        }
        // server-first: every proper prefix fails.
        for end in 0..server_first.len() {
            let (mut client, _) = ScramClient::start_with_nonce(
                mechanism,
                credential("user", "pencil"),
                RFC_CLIENT_NONCE,
            );
            assert!(
                client
                    .server_first(&server_first.as_bytes()[..end])
                    .is_err(),
                "{end}"
            );
        }
        for input in garbage {
            let (mut client, _) = ScramClient::start(mechanism, credential("user", "pencil"));
            assert!(client.server_first(input).is_err());
        }
        // client-final: every proper prefix fails.
        for end in 0..client_final.len() {
            let mut server = ScramServer::with_nonce(mechanism, RFC_SERVER_NONCE);
            server
                .client_first(client_first.as_bytes(), |_| Some(verifier.clone()))
                .unwrap();
            assert!(
                server
                    .client_final(&client_final.as_bytes()[..end])
                    .is_err(),
                "{end}"
            );
        }
        for input in garbage {
            let mut server = ScramServer::with_nonce(mechanism, RFC_SERVER_NONCE);
            server
                .client_first(client_first.as_bytes(), |_| Some(verifier.clone()))
                .unwrap();
            assert!(server.client_final(input).is_err());
        }
        // server-final: every proper prefix fails.
        let credential = credential("user", "pencil");
        let ready_client = || {
            let (mut client, _) =
                ScramClient::start_with_nonce(mechanism, credential.clone(), RFC_CLIENT_NONCE);
            client.server_first(server_first.as_bytes()).unwrap();
            client
        };
        for end in 0..server_final.len() {
            assert!(
                ready_client()
                    .server_final(&server_final.as_bytes()[..end])
                    .is_err(),
                "{end}"
            );
        }
        for input in garbage {
            assert!(ready_client().server_final(input).is_err());
        }
    }

    #[test]
    fn salted_password_is_cached() {
        let mechanism = Mechanism::ScramSha256;
        let verifier = Verifier::generate(mechanism, "pw");
        let shared = credential("user", "pw");
        let exchange = |verifier: &Verifier| {
            let (mut client, client_first) = ScramClient::start(mechanism, shared.clone());
            let mut server = ScramServer::new(mechanism);
            let server_first = server
                .client_first(&client_first, |_| Some(verifier.clone()))
                .unwrap();
            let server_final = server
                .client_final(&client.server_first(&server_first).unwrap())
                .unwrap();
            client.server_final(&server_final).unwrap();
        };
        exchange(&verifier);
        assert_eq!(shared.derivations.load(Ordering::Relaxed), 1);
        exchange(&verifier);
        assert_eq!(shared.derivations.load(Ordering::Relaxed), 1);
        // Another salt (a rotated verifier) is derived once, then cached too.
        let rotated = Verifier::generate(mechanism, "pw");
        exchange(&rotated);
        exchange(&rotated);
        exchange(&verifier);
        assert_eq!(shared.derivations.load(Ordering::Relaxed), 2);
        // The cache is bounded: a hostile server sending new salts cannot grow it.
        for _ in 0..10 {
            exchange(&Verifier::generate(mechanism, "pw"));
        }
        assert_eq!(shared.lock_cache().len(), CACHE_ENTRIES);
    }

    #[test]
    fn verifier_matches() {
        for mechanism in Mechanism::ALL {
            let verifier = Verifier::generate(mechanism, "pw");
            assert!(verifier.matches("pw"));
            assert!(!verifier.matches("pw "));
            assert!(!verifier.matches(""));
        }
        let verifier = rfc_verifier(Mechanism::ScramSha256);
        assert!(verifier.matches("pencil"));
        assert_eq!(verifier, rfc_verifier(Mechanism::ScramSha256));
        assert_ne!(verifier, rfc_verifier(Mechanism::ScramSha512));
    }

    #[test]
    fn a_verifier_from_the_salted_password_is_the_one_from_the_password() {
        let salt = BASE64.decode(RFC_SALT).unwrap();
        for mechanism in Mechanism::ALL {
            let salted = mechanism.salted_password("pencil", &salt, 4096);
            assert_eq!(salted.len(), mechanism.output_len());
            let verifier = Verifier::from_salted_password(mechanism, &salted, &salt, 4096);
            assert_eq!(verifier, rfc_verifier(mechanism), "{mechanism}");
            assert!(verifier.matches("pencil"));
            assert_eq!(verifier.stored_key.len(), salted.len());
            // Not a salted password of this mechanism: told apart by length.
            let short = Verifier::from_salted_password(mechanism, &salted[..16], &salt, 4096);
            assert_ne!(short.stored_key.len(), 16);
            assert!(!short.matches("pencil"));
        }
    }

    #[test]
    fn debug_prints_no_secrets() {
        let verifier = rfc_verifier(Mechanism::ScramSha256);
        let debug = format!("{verifier:?}");
        assert!(
            debug.contains("ScramSha256") && debug.contains("4096"),
            "{debug}"
        );
        for key in [&verifier.salt, &verifier.stored_key, &verifier.server_key] {
            assert!(!debug.contains(&BASE64.encode(key)), "{debug}");
            assert!(!debug.contains(&format!("{:?}", key)), "{debug}");
        }
        let credential = credential("broker-1", "hunter2-password");
        let debug = format!("{credential:?}");
        assert!(
            debug.contains("broker-1") && !debug.contains("hunter2"),
            "{debug}"
        );
        let (client, _) = ScramClient::start(Mechanism::ScramSha256, credential);
        let debug = format!("{client:?}");
        assert!(
            debug.contains("broker-1") && !debug.contains("hunter2"),
            "{debug}"
        );
        let server = ScramServer::new(Mechanism::ScramSha256);
        assert!(format!("{server:?}").contains("awaiting client-first"));
    }

    #[test]
    fn types_are_shareable() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<ClientCredential>();
        send_sync::<ScramClient>();
        send_sync::<ScramServer>();
        send_sync::<ScramError>();
    }

    proptest! {
        #[test]
        fn arbitrary_client_first(message in proptest::collection::vec(any::<u8>(), 0..200)) {
            let verifier = rfc_verifier_cached();
            let mut server = ScramServer::new(Mechanism::ScramSha256);
            prop_assert!(server.client_first(&message, |_| Some(verifier.clone())).is_err());
        }

        #[test]
        fn arbitrary_server_first(message in proptest::collection::vec(any::<u8>(), 0..200)) {
            let (mut client, _) = ScramClient::start(Mechanism::ScramSha256, credential("user", "pw"));
            prop_assert!(client.server_first(&message).is_err());
        }

        #[test]
        fn arbitrary_client_final(message in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut server = ScramServer::with_nonce(Mechanism::ScramSha256, RFC_SERVER_NONCE);
            server
                .client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", |_| Some(rfc_verifier_cached()))
                .unwrap();
            prop_assert!(server.client_final(&message).is_err());
        }

        #[test]
        fn arbitrary_server_final(message in proptest::collection::vec(any::<u8>(), 0..200)) {
            let (mut client, _) =
                ScramClient::start_with_nonce(Mechanism::ScramSha256, cached_credential(), RFC_CLIENT_NONCE);
            client
                .server_first(
                    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                )
                .unwrap();
            prop_assert!(client.server_final(&message).is_err());
        }

        /// Well-formed-looking messages built from random attribute values.
        #[test]
        fn structured_client_first(
            flag in "[nyp]=?[a-z-]{0,5}",
            authzid in "(a=[a-z=2CD,]{0,6})?",
            user in "[a-z=,23CD]{0,8}",
            nonce in "[!-~]{0,10}",
            rest in "(,[a-z]{0,3}=?[a-z]{0,3}){0,3}",
        ) {
            let message = format!("{flag},{authzid},n={user},r={nonce}{rest}");
            let mut server = ScramServer::new(Mechanism::ScramSha256);
            let _ = server.client_first(message.as_bytes(), |_| Some(rfc_verifier_cached()));
        }
    }

    /// The RFC verifier, computed once for the property tests.
    fn rfc_verifier_cached() -> Verifier {
        static VERIFIER: std::sync::OnceLock<Verifier> = std::sync::OnceLock::new();
        VERIFIER
            .get_or_init(|| rfc_verifier(Mechanism::ScramSha256))
            .clone()
    }

    /// The RFC client credential, shared so that its salted password is cached.
    fn cached_credential() -> Arc<ClientCredential> {
        static CREDENTIAL: std::sync::OnceLock<Arc<ClientCredential>> = std::sync::OnceLock::new();
        CREDENTIAL
            .get_or_init(|| credential("user", "pencil"))
            .clone()
    }
}
