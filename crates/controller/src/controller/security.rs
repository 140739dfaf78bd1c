//! Users and ACLs: `AlterUserScramCredentials`, `CreateAcls`, `DeleteAcls`, and the
//! bootstrap users of `scram_bootstrap_file`.
//!
//! A user is a name with a SCRAM credential (a verifier, never a password) per
//! mechanism; an ACL is a [`syncline_auth::acl::AclBinding`]. Both live in the
//! metadata image and reach every broker whole, in `LeaderAndIsr`.

use std::collections::{BTreeMap, BTreeSet};

use syncline_auth::acl::{AclBinding, AclFilter};
use syncline_auth::credentials::broker_id_of;
use syncline_auth::scram::{MAX_ITERATIONS, MIN_ITERATIONS};
use syncline_auth::{Mechanism, Verifier};
use syncline_proto::{pb, ErrorCode};

use super::{Controller, ControllerResult};
use crate::records;

/// The longest user name, in bytes.
pub const MAX_USER_NAME_LEN: usize = 255;

/// Why a user name is refused: empty, too long, with whitespace or control
/// characters (which the bootstrap file's format and the logs could not show), or a
/// broker's own name (`broker-N`).
pub(crate) fn check_user_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the user name is empty: give every user a name".to_string());
    }
    if name.len() > MAX_USER_NAME_LEN {
        let start: String = name.chars().take(32).collect();
        return Err(format!(
            "user name {start:?}... is {} bytes long: the limit is {MAX_USER_NAME_LEN}; use a \
             shorter name",
            name.len()
        ));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "user name {name:?} contains whitespace or a control character: use a name without them"
        ));
    }
    if let Some(id) = broker_id_of(name) {
        return Err(format!(
            "user name {name:?} is reserved for broker {id} (brokers authenticate with the \
             credentials in their credentials directory, not with metadata users): choose another \
             name"
        ));
    }
    Ok(())
}

/// The mechanism of a mechanism name, or UNSUPPORTED_SASL_MECHANISM.
fn mechanism(name: &str) -> Result<Mechanism, (ErrorCode, String)> {
    Mechanism::from_name(name).ok_or_else(|| {
        (
            ErrorCode::UnsupportedSaslMechanism,
            format!(
                "unknown SCRAM mechanism {name:?}: use {} or {}",
                Mechanism::ScramSha256.name(),
                Mechanism::ScramSha512.name()
            ),
        )
    })
}

/// The length in bytes of a mechanism's keys (its hash's output).
fn key_len(mechanism: Mechanism) -> usize {
    match mechanism {
        Mechanism::ScramSha256 => 32,
        Mechanism::ScramSha512 => 64,
    }
}

/// Checks a credential as a user record must be: a valid name, a known mechanism,
/// iterations within [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`], a salt, and keys as long
/// as the mechanism's hash. The error is the code and message a client gets.
pub(crate) fn check_credential(c: &pb::ScramCredential) -> Result<Mechanism, (ErrorCode, String)> {
    let unacceptable = |m: String| (ErrorCode::UnacceptableCredential, m);
    check_user_name(&c.name).map_err(unacceptable)?;
    let m = mechanism(&c.mechanism)?;
    let remake = "make the credential with `syncline user create` or `syncline user verifier`";
    let in_range =
        u32::try_from(c.iterations).is_ok_and(|i| (MIN_ITERATIONS..=MAX_ITERATIONS).contains(&i));
    if !in_range {
        return Err(unacceptable(format!(
            "user {:?}: {} iterations is out of range: use {MIN_ITERATIONS} to {MAX_ITERATIONS}",
            c.name, c.iterations
        )));
    }
    if c.salt.is_empty() {
        return Err(unacceptable(format!(
            "user {:?}: the {m} credential has an empty salt: {remake}",
            c.name
        )));
    }
    for (field, key) in [("stored_key", &c.stored_key), ("server_key", &c.server_key)] {
        if key.len() != key_len(m) {
            return Err(unacceptable(format!(
                "user {:?}: {field} has {} bytes, but {m} keys have {}: {remake}",
                c.name,
                key.len(),
                key_len(m)
            )));
        }
    }
    Ok(m)
}

/// The credential record of `name`'s `verifier`.
pub fn credential_of(name: &str, verifier: &Verifier) -> pb::ScramCredential {
    pb::ScramCredential {
        name: name.to_owned(),
        mechanism: verifier.mechanism.name().to_owned(),
        salt: verifier.salt.clone().into(),
        iterations: i32::try_from(verifier.iterations).unwrap_or(i32::MAX),
        stored_key: verifier.stored_key.clone().into(),
        server_key: verifier.server_key.clone().into(),
    }
}

/// The verifier a credential holds; `None` when it is not valid (see
/// `check_credential`: unknown mechanism, iterations out of range, keys of the
/// wrong length).
pub fn verifier_of(c: &pb::ScramCredential) -> Option<Verifier> {
    let mechanism = check_credential(c).ok()?;
    Some(Verifier {
        mechanism,
        salt: c.salt.to_vec(),
        iterations: u32::try_from(c.iterations).ok()?,
        stored_key: c.stored_key.to_vec(),
        server_key: c.server_key.to_vec(),
    })
}

/// One change a request asks for.
enum Alteration<'a> {
    Upsert(&'a pb::ScramCredential),
    Delete,
}

impl Controller {
    /// `AlterUserScramCredentials`: one result per user named, in the order they
    /// first appear (upsertions, then deletions). A user's changes are all made or
    /// none: NONE and a `UserScramCredentialRecord` per upsertion and a
    /// `RemoveUserScramCredentialRecord` per deletion; otherwise the first problem
    /// found: DUPLICATE_RESOURCE when the request changes one (user, mechanism)
    /// twice, UNACCEPTABLE_CREDENTIAL for an invalid name (empty, over
    /// [`MAX_USER_NAME_LEN`] bytes, whitespace, a broker's `broker-N`) or credential
    /// (iterations out of range, keys not as long as the hash's output, no salt),
    /// UNSUPPORTED_SASL_MECHANISM for a mechanism other than SCRAM-SHA-256/512, and
    /// RESOURCE_NOT_FOUND when deleting a credential the user does not have.
    pub fn alter_user_scram_credentials(
        &self,
        req: &pb::AlterUserScramCredentialsRequest,
    ) -> ControllerResult<pb::AlterUserScramCredentialsResponse> {
        let alterations: Vec<(&str, &str, Alteration<'_>)> = req
            .upsertions
            .iter()
            .map(|c| (c.name.as_str(), c.mechanism.as_str(), Alteration::Upsert(c)))
            .chain(
                req.deletions
                    .iter()
                    .map(|d| (d.name.as_str(), d.mechanism.as_str(), Alteration::Delete)),
            )
            .collect();
        let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        let mut users: Vec<&str> = Vec::new();
        for (name, mechanism, _) in &alterations {
            *counts.entry((name, mechanism)).or_default() += 1;
            if !users.contains(name) {
                users.push(name);
            }
        }
        let mut records = Vec::new();
        let results = users
            .into_iter()
            .map(|user| {
                let mut changes = Vec::new();
                let outcome = alterations
                    .iter()
                    .filter(|(name, _, _)| *name == user)
                    .try_for_each(|(name, mech, alteration)| {
                        if counts[&(*name, *mech)] > 1 {
                            return Err((
                                ErrorCode::DuplicateResource,
                                format!(
                                    "the request changes user {name:?}'s {mech} credential more \
                                     than once: send one upsertion or deletion per user and \
                                     mechanism"
                                ),
                            ));
                        }
                        match alteration {
                            Alteration::Upsert(c) => {
                                check_credential(c)?;
                                changes.push(records::user_scram_credential_record(c));
                            }
                            Alteration::Delete => {
                                check_user_name(name)
                                    .map_err(|m| (ErrorCode::UnacceptableCredential, m))?;
                                let m = mechanism(mech)?;
                                if self.image.scram_credential(name, m).is_none() {
                                    return Err((
                                        ErrorCode::ResourceNotFound,
                                        format!(
                                            "user {name:?} has no {m} credential to delete \
                                             (`syncline user list` shows every user's mechanisms)"
                                        ),
                                    ));
                                }
                                changes.push(records::remove_user_scram_credential_record(
                                    name,
                                    m.name(),
                                ));
                            }
                        }
                        Ok(())
                    });
                let (code, message) = match outcome {
                    Ok(()) => {
                        tracing::info!(user, changes = changes.len(), "altering user credentials");
                        records.extend(changes);
                        (ErrorCode::None, String::new())
                    }
                    Err(e) => e,
                };
                pb::AlterUserScramCredentialsResult {
                    user: user.to_owned(),
                    error_code: code as i32,
                    error_message: message,
                }
            })
            .collect();
        ControllerResult::new(
            pb::AlterUserScramCredentialsResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                results,
            },
            records,
        )
    }

    /// The users of `scram_bootstrap_file`, once in the cluster's life: a
    /// `UserScramCredentialRecord` per credential while no user record was ever
    /// committed, nothing after (the response is how many are proposed). Invalid
    /// credentials (which the file's parser refuses first) and repeats of a
    /// (user, mechanism) are skipped.
    pub fn bootstrap_scram_credentials(
        &self,
        credentials: &[pb::ScramCredential],
    ) -> ControllerResult<usize> {
        if self.image.users_initialized() {
            return ControllerResult::answer(0);
        }
        let mut seen = BTreeSet::new();
        let records: Vec<pb::MetadataRecord> = credentials
            .iter()
            .filter(|c| check_credential(c).is_ok())
            .filter(|c| seen.insert((c.name.as_str(), c.mechanism.as_str())))
            .map(records::user_scram_credential_record)
            .collect();
        ControllerResult::new(records.len(), records)
    }

    /// `CreateAcls`: one result per ACL, in order. NONE for a valid ACL, with an
    /// `AclRecord` unless the image (or an earlier creation of the same request)
    /// has it already; INVALID_REQUEST, saying what is wrong, for an invalid one
    /// (see [`AclBinding::from_pb`]).
    pub fn create_acls(
        &self,
        req: &pb::CreateAclsRequest,
    ) -> ControllerResult<pb::CreateAclsResponse> {
        let mut added = BTreeSet::new();
        let mut records = Vec::new();
        let results = req
            .creations
            .iter()
            .map(|creation| match AclBinding::from_pb(creation) {
                Err(e) => pb::AclResult {
                    error_code: ErrorCode::InvalidRequest as i32,
                    error_message: format!("invalid ACL: {e}"),
                },
                Ok(acl) => {
                    if !self.image.has_acl(&acl) && added.insert(acl.clone()) {
                        tracing::info!(acl = %acl, "adding ACL");
                        records.push(records::acl_record(&acl));
                    }
                    pb::AclResult {
                        error_code: ErrorCode::None as i32,
                        error_message: String::new(),
                    }
                }
            })
            .collect();
        ControllerResult::new(
            pb::CreateAclsResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                results,
            },
            records,
        )
    }

    /// `DeleteAcls`: one result per filter, in order, with the ACLs it matched
    /// (an ACL two filters match is in both results, and removed once): a
    /// `RemoveAclRecord` per ACL matched. INVALID_REQUEST for an invalid filter (see
    /// [`AclFilter::from_pb`]); a filter that matches nothing is not an error.
    pub fn delete_acls(
        &self,
        req: &pb::DeleteAclsRequest,
    ) -> ControllerResult<pb::DeleteAclsResponse> {
        let mut removed = BTreeSet::new();
        let mut records = Vec::new();
        let results = req
            .filters
            .iter()
            .map(|f| match AclFilter::from_pb(f) {
                Err(e) => pb::DeleteAclsFilterResult {
                    error_code: ErrorCode::InvalidRequest as i32,
                    error_message: format!("invalid ACL filter: {e}"),
                    deleted: Vec::new(),
                },
                Ok(filter) => {
                    let matched: Vec<&AclBinding> =
                        self.image.acls().filter(|a| filter.matches(a)).collect();
                    for acl in &matched {
                        if removed.insert(*acl) {
                            tracing::info!(acl = %acl, "removing ACL");
                            records.push(records::remove_acl_record(acl));
                        }
                    }
                    pb::DeleteAclsFilterResult {
                        error_code: ErrorCode::None as i32,
                        error_message: String::new(),
                        deleted: matched.into_iter().map(AclBinding::to_pb).collect(),
                    }
                }
            })
            .collect();
        ControllerResult::new(
            pb::DeleteAclsResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                results,
            },
            records,
        )
    }
}
