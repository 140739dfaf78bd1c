//! The ACL authorizer: which principal may do what on which resource.
//!
//! Pure: no I/O and no clock. The controller validates ACLs with
//! [`AclBinding::from_pb`] and deletes them by [`AclFilter`]; brokers hold the
//! committed set as [`Acls`] and ask [`authorize`] before serving a request.
//!
//! The vocabulary and the numeric codes are Kafka's (`kafka-acls`,
//! `CreateAcls`), and so are the rules [`authorize`] applies:
//!
//! 1. a super user is allowed everything;
//! 2. an ACL that matches and denies the operation (or `All`) denies;
//! 3. an ACL that matches and allows the operation, `All`, or an operation that
//!    implies it (`Read`, `Write`, `Delete` and `Alter` imply `Describe`;
//!    `AlterConfigs` implies `DescribeConfigs`) allows;
//! 4. a resource that no ACL at all applies to (whatever its principal, host,
//!    operation) is allowed to everyone when
//!    [`AuthorizerConfig::allow_everyone_if_no_acl_found`], else denied;
//! 5. anything else is denied.
//!
//! An ACL applies to a resource of its type when its pattern is literal and
//! names the resource or is `*`, or is prefixed and the resource's name starts
//! with it. It matches a request when, in addition, its principal is the
//! request's or `User:*`, and its host is the client's address or `*`.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use syncline_proto::pb;

/// The one name a [`ResourceType::Cluster`] resource has.
pub const CLUSTER_RESOURCE_NAME: &str = "kafka-cluster";

/// The principal of a connection that did not authenticate (a `PLAINTEXT` or
/// `SSL` listener without a client certificate).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// The principal or resource name that stands for every one.
pub const WILDCARD: &str = "*";

/// The prefix every principal has: syncline knows only users.
pub const USER_PRINCIPAL_PREFIX: &str = "User:";

/// Kafka's code for "any" in a filter.
const ANY_CODE: i32 = 1;
/// Kafka's pattern-type code for "the ACLs that apply to the name" in a filter.
const MATCH_CODE: i32 = 2;

/// Compares names the way `from_name` accepts them: case-insensitive, with
/// `-` and `_` ignored (`describe-configs` is `DescribeConfigs`).
fn same_name(given: &str, canonical: &str) -> bool {
    let mut given = given.chars().filter(|c| *c != '-' && *c != '_');
    let mut canonical = canonical.chars().filter(|c| *c != '-' && *c != '_');
    loop {
        match (given.next(), canonical.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a.eq_ignore_ascii_case(&b) => {}
            _ => return false,
        }
    }
}

/// What kind of thing an ACL protects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    /// A topic (code 2).
    Topic,
    /// A consumer group (code 3).
    Group,
    /// The cluster itself, named [`CLUSTER_RESOURCE_NAME`] (code 4).
    Cluster,
}

impl ResourceType {
    /// Every resource type, in code order.
    pub const ALL: [ResourceType; 3] = [
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster,
    ];

    /// Kafka's code: `TOPIC=2`, `GROUP=3`, `CLUSTER=4`.
    #[must_use]
    pub fn code(self) -> i32 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
        }
    }

    /// The resource type of a code; `None` for `UNKNOWN`, `ANY` and codes
    /// syncline does not know.
    #[must_use]
    pub fn from_code(code: i32) -> Option<ResourceType> {
        ResourceType::ALL.into_iter().find(|t| t.code() == code)
    }

    /// The name: `"Topic"`, `"Group"` or `"Cluster"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ResourceType::Topic => "Topic",
            ResourceType::Group => "Group",
            ResourceType::Cluster => "Cluster",
        }
    }

    /// The resource type of a name, case-insensitive (`"topic"`, `"TOPIC"`).
    #[must_use]
    pub fn from_name(name: &str) -> Option<ResourceType> {
        ResourceType::ALL
            .into_iter()
            .find(|t| same_name(name, t.name()))
    }

    /// The operations an ACL on this resource type may name (Kafka's lists).
    #[must_use]
    pub fn operations(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            ResourceType::Topic => &[
                All,
                Read,
                Write,
                Create,
                Delete,
                Alter,
                Describe,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[All, Read, Describe, Delete],
            ResourceType::Cluster => &[
                All,
                Create,
                Alter,
                Describe,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
            ],
        }
    }
}

impl fmt::Display for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How an ACL's resource name is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PatternType {
    /// The name exactly, or every resource when the name is `*` (code 3).
    Literal,
    /// Every resource whose name starts with the name (code 4).
    Prefixed,
}

impl PatternType {
    /// Both pattern types, in code order.
    pub const ALL: [PatternType; 2] = [PatternType::Literal, PatternType::Prefixed];

    /// Kafka's code: `LITERAL=3`, `PREFIXED=4`.
    #[must_use]
    pub fn code(self) -> i32 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    /// The pattern type of a code; `None` for `UNKNOWN`, `ANY`, `MATCH` and
    /// unknown codes.
    #[must_use]
    pub fn from_code(code: i32) -> Option<PatternType> {
        PatternType::ALL.into_iter().find(|t| t.code() == code)
    }

    /// The name as Kafka prints it: `"LITERAL"` or `"PREFIXED"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            PatternType::Literal => "LITERAL",
            PatternType::Prefixed => "PREFIXED",
        }
    }

    /// The pattern type of a name, case-insensitive (`"literal"`, `"PREFIXED"`).
    #[must_use]
    pub fn from_name(name: &str) -> Option<PatternType> {
        PatternType::ALL
            .into_iter()
            .find(|t| same_name(name, t.name()))
    }
}

impl fmt::Display for PatternType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a request does to a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// Every operation (code 2); only in ACLs, never asked for.
    All,
    /// Consume from a topic, join or commit in a group (code 3).
    Read,
    /// Produce to a topic (code 4).
    Write,
    /// Create topics (code 5).
    Create,
    /// Delete topics, records, groups (code 6).
    Delete,
    /// Add partitions, alter ACLs and user credentials (code 7).
    Alter,
    /// Metadata, offsets, group descriptions, ACL and user listings (code 8).
    Describe,
    /// Inter-broker requests (code 9).
    ClusterAction,
    /// Describe configs (code 10).
    DescribeConfigs,
    /// Alter configs (code 11).
    AlterConfigs,
    /// Idempotent produce: `InitProducerId` (code 12).
    IdempotentWrite,
}

impl Operation {
    /// Every operation, in code order.
    pub const ALL: [Operation; 11] = [
        Operation::All,
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::Describe,
        Operation::ClusterAction,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::IdempotentWrite,
    ];

    /// Kafka's code, `ALL=2` to `IDEMPOTENT_WRITE=12`.
    #[must_use]
    pub fn code(self) -> i32 {
        match self {
            Operation::All => 2,
            Operation::Read => 3,
            Operation::Write => 4,
            Operation::Create => 5,
            Operation::Delete => 6,
            Operation::Alter => 7,
            Operation::Describe => 8,
            Operation::ClusterAction => 9,
            Operation::DescribeConfigs => 10,
            Operation::AlterConfigs => 11,
            Operation::IdempotentWrite => 12,
        }
    }

    /// The operation of a code; `None` for `UNKNOWN`, `ANY` and unknown codes.
    #[must_use]
    pub fn from_code(code: i32) -> Option<Operation> {
        Operation::ALL.into_iter().find(|o| o.code() == code)
    }

    /// The name in `kafka-acls`'s spelling: `"Read"`, `"DescribeConfigs"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Operation::All => "All",
            Operation::Read => "Read",
            Operation::Write => "Write",
            Operation::Create => "Create",
            Operation::Delete => "Delete",
            Operation::Alter => "Alter",
            Operation::Describe => "Describe",
            Operation::ClusterAction => "ClusterAction",
            Operation::DescribeConfigs => "DescribeConfigs",
            Operation::AlterConfigs => "AlterConfigs",
            Operation::IdempotentWrite => "IdempotentWrite",
        }
    }

    /// The operation of a name, case-insensitive and ignoring `-` and `_`:
    /// `"Read"`, `"READ"`, `"read"`, `"DescribeConfigs"`, `"describe-configs"`,
    /// `"DESCRIBE_CONFIGS"`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Operation> {
        Operation::ALL
            .into_iter()
            .find(|o| same_name(name, o.name()))
    }

    /// Whether an ACL on `resource_type` may name this operation.
    #[must_use]
    pub fn valid_for(self, resource_type: ResourceType) -> bool {
        resource_type.operations().contains(&self)
    }

    /// Whether an ALLOW ACL for this operation allows `requested`: the same
    /// operation, `All`, or one that implies it (`Read`, `Write`, `Delete`,
    /// `Alter` imply `Describe`; `AlterConfigs` implies `DescribeConfigs`).
    #[must_use]
    pub fn allows(self, requested: Operation) -> bool {
        self == requested
            || self == Operation::All
            || (requested == Operation::Describe
                && matches!(
                    self,
                    Operation::Read | Operation::Write | Operation::Delete | Operation::Alter
                ))
            || (requested == Operation::DescribeConfigs && self == Operation::AlterConfigs)
    }

    /// Whether a DENY ACL for this operation denies `requested`: the same
    /// operation or `All` (a denial implies nothing else).
    #[must_use]
    pub fn denies(self, requested: Operation) -> bool {
        self == requested || self == Operation::All
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether an ACL allows or denies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    /// Denies (code 2); beats any allow.
    Deny,
    /// Allows (code 3).
    Allow,
}

impl Permission {
    /// Both permissions, in code order.
    pub const ALL: [Permission; 2] = [Permission::Deny, Permission::Allow];

    /// Kafka's code: `DENY=2`, `ALLOW=3`.
    #[must_use]
    pub fn code(self) -> i32 {
        match self {
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }

    /// The permission of a code; `None` for `UNKNOWN`, `ANY` and unknown codes.
    #[must_use]
    pub fn from_code(code: i32) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.code() == code)
    }

    /// The name: `"Deny"` or `"Allow"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Permission::Deny => "Deny",
            Permission::Allow => "Allow",
        }
    }

    /// The permission of a name, case-insensitive.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Permission> {
        Permission::ALL
            .into_iter()
            .find(|p| same_name(name, p.name()))
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an ACL, a filter or a `super_users` list is not valid. Each message
/// names the field and what would be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// A numeric code that is not one of Kafka's for the field (or `ANY`/`MATCH`
    /// where a binding needs a definite value).
    #[error("unknown {field} code {code}: expected {expected}")]
    UnknownCode {
        /// The field: `resource_type`, `pattern_type`, `operation`, `permission_type`.
        field: &'static str,
        /// The code given.
        code: i32,
        /// The codes accepted, in words.
        expected: &'static str,
    },
    /// The principal is not `User:NAME` or `User:*`.
    #[error("invalid principal {0:?}: expected User:NAME (for example User:alice) or User:* for every user")]
    Principal(String),
    /// The host is not `*` or an IP address.
    #[error("invalid host {0:?}: expected * (any host) or an IPv4 or IPv6 address (host names are not resolved)")]
    Host(String),
    /// The resource name is empty.
    #[error(
        "the resource name is empty: name the {0} (or use * for every {0} with a literal pattern)"
    )]
    EmptyResourceName(ResourceType),
    /// A cluster ACL names something other than [`CLUSTER_RESOURCE_NAME`], or
    /// is prefixed.
    #[error("invalid cluster resource {pattern_type}:{name:?}: the cluster's only name is the literal {CLUSTER_RESOURCE_NAME:?}")]
    ClusterName {
        /// The name given.
        name: String,
        /// The pattern type given.
        pattern_type: PatternType,
    },
    /// A prefixed pattern of `*`: it would match only names starting with `*`.
    #[error("a prefixed pattern \"*\" matches only names that start with '*': use the literal pattern \"*\" for every {0}")]
    PrefixedWildcard(ResourceType),
    /// The operation does not apply to the resource type.
    #[error("operation {operation} is not valid for {resource_type} resources (valid: {})", valid_list(*.resource_type))]
    OperationNotValid {
        /// The operation given.
        operation: Operation,
        /// The resource type given.
        resource_type: ResourceType,
    },
    /// `User:*` in `super_users`: it would not make everyone a super user.
    #[error("super_users may not list User:* (super users are named one by one; to let everyone do everything, disable the authorizer)")]
    WildcardSuperUser,
}

fn valid_list(resource_type: ResourceType) -> String {
    let names: Vec<&str> = resource_type
        .operations()
        .iter()
        .map(|o| o.name())
        .collect();
    names.join(", ")
}

fn decode_code<T>(
    field: &'static str,
    code: i32,
    expected: &'static str,
    from_code: fn(i32) -> Option<T>,
) -> Result<T, AclError> {
    from_code(code).ok_or(AclError::UnknownCode {
        field,
        code,
        expected,
    })
}

const RESOURCE_TYPE_CODES: &str = "2 (Topic), 3 (Group) or 4 (Cluster)";
const PATTERN_TYPE_CODES: &str = "3 (LITERAL) or 4 (PREFIXED)";
const OPERATION_CODES: &str = "2 (All) to 12 (IdempotentWrite)";
const PERMISSION_CODES: &str = "2 (Deny) or 3 (Allow)";

/// Checks a principal: `User:NAME` (non-empty name) or `User:*`.
fn validate_principal(principal: &str) -> Result<(), AclError> {
    match principal.strip_prefix(USER_PRINCIPAL_PREFIX) {
        Some(name) if !name.is_empty() => Ok(()),
        _ => Err(AclError::Principal(principal.to_owned())),
    }
}

/// Checks a host and gives its canonical spelling: `*`, or the address as
/// [`IpAddr`] prints it.
fn canonical_host(host: &str) -> Result<String, AclError> {
    if host == WILDCARD {
        return Ok(WILDCARD.to_owned());
    }
    host.parse::<IpAddr>()
        .map(|ip| ip.to_string())
        .map_err(|_| AclError::Host(host.to_owned()))
}

/// Whether an ACL's host covers a client's address: `*`, the same text, or
/// the same address however spelt (an IPv4-mapped IPv6 address is its IPv4
/// address).
fn host_matches(acl_host: &str, host: &str) -> bool {
    if acl_host == WILDCARD || acl_host == host {
        return true;
    }
    match (acl_host.parse::<IpAddr>(), host.parse::<IpAddr>()) {
        (Ok(a), Ok(b)) => a.to_canonical() == b.to_canonical(),
        _ => false,
    }
}

/// Whether an ACL's principal covers a request's: the same, or `User:*`.
fn principal_matches(acl_principal: &str, principal: &str) -> bool {
    acl_principal == principal || acl_principal == "User:*"
}

/// One ACL: `principal` has `permission` for `operation` on the resources of
/// `resource_type` that `pattern_type` `resource_name` covers, from `host`.
///
/// Built by [`AclBinding::from_pb`], which validates it; the fields are public
/// for reading and for tests, and code that builds one by hand is trusted to
/// keep it valid.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    /// What kind of resource.
    pub resource_type: ResourceType,
    /// The resource's name, a prefix of names, or `*` (literal) for all.
    pub resource_name: String,
    /// How `resource_name` is matched.
    pub pattern_type: PatternType,
    /// `User:NAME` or `User:*`.
    pub principal: String,
    /// `*` or an IP address, in [`IpAddr`]'s spelling.
    pub host: String,
    /// The operation allowed or denied.
    pub operation: Operation,
    /// Allow or deny.
    pub permission: Permission,
}

impl AclBinding {
    /// Validates a binding off the wire: known codes (not `UNKNOWN`, `ANY` or
    /// `MATCH`), a principal `User:NAME` or `User:*`, a host `*` or an IP
    /// address (kept in canonical form), a non-empty resource name, the
    /// cluster named literally [`CLUSTER_RESOURCE_NAME`], no prefixed `*`, and
    /// an operation valid for the resource type.
    pub fn from_pb(pb: &pb::AclBinding) -> Result<AclBinding, AclError> {
        let resource_type = decode_code(
            "resource_type",
            pb.resource_type,
            RESOURCE_TYPE_CODES,
            ResourceType::from_code,
        )?;
        let pattern_type = decode_code(
            "pattern_type",
            pb.pattern_type,
            PATTERN_TYPE_CODES,
            PatternType::from_code,
        )?;
        let operation = decode_code(
            "operation",
            pb.operation,
            OPERATION_CODES,
            Operation::from_code,
        )?;
        let permission = decode_code(
            "permission_type",
            pb.permission_type,
            PERMISSION_CODES,
            Permission::from_code,
        )?;
        if pb.resource_name.is_empty() {
            return Err(AclError::EmptyResourceName(resource_type));
        }
        if resource_type == ResourceType::Cluster
            && (pb.resource_name != CLUSTER_RESOURCE_NAME || pattern_type != PatternType::Literal)
        {
            return Err(AclError::ClusterName {
                name: pb.resource_name.clone(),
                pattern_type,
            });
        }
        if pattern_type == PatternType::Prefixed && pb.resource_name == WILDCARD {
            return Err(AclError::PrefixedWildcard(resource_type));
        }
        validate_principal(&pb.principal)?;
        let host = canonical_host(&pb.host)?;
        if !operation.valid_for(resource_type) {
            return Err(AclError::OperationNotValid {
                operation,
                resource_type,
            });
        }
        Ok(AclBinding {
            resource_type,
            resource_name: pb.resource_name.clone(),
            pattern_type,
            principal: pb.principal.clone(),
            host,
            operation,
            permission,
        })
    }

    /// The binding on the wire.
    #[must_use]
    pub fn to_pb(&self) -> pb::AclBinding {
        pb::AclBinding {
            resource_type: self.resource_type.code(),
            resource_name: self.resource_name.clone(),
            pattern_type: self.pattern_type.code(),
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: self.operation.code(),
            permission_type: self.permission.code(),
        }
    }

    /// Whether this ACL applies to `resource`: same type, and the literal name
    /// or `*`, or a prefix of its name.
    #[must_use]
    pub fn applies_to(&self, resource: Resource<'_>) -> bool {
        self.resource_type == resource.resource_type && self.pattern_covers(resource.name)
    }

    /// Whether the pattern covers a name of the right type.
    fn pattern_covers(&self, name: &str) -> bool {
        match self.pattern_type {
            PatternType::Literal => self.resource_name == name || self.resource_name == WILDCARD,
            PatternType::Prefixed => name.starts_with(self.resource_name.as_str()),
        }
    }

    /// Whether this ACL is about `principal` connected from `host`.
    fn concerns(&self, principal: &str, host: &str) -> bool {
        principal_matches(&self.principal, principal) && host_matches(&self.host, host)
    }
}

impl fmt::Display for AclBinding {
    /// `User:alice has Allow permission for operation Write on
    /// Topic:LITERAL:orders from host *`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} has {} permission for operation {} on {}:{}:{} from host {}",
            self.principal,
            self.permission,
            self.operation,
            self.resource_type,
            self.pattern_type,
            self.resource_name,
            self.host
        )
    }
}

/// How an [`AclFilter`] matches an ACL's pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatternFilter {
    /// Any pattern type (code 1); the name, if given, compared exactly.
    Any,
    /// The ACLs that apply to the name (code 2): literal equal, literal `*`,
    /// or prefixed with a prefix of it. Without a name, every ACL.
    Match,
    /// Literal patterns only, the name (if given) exactly (code 3).
    Literal,
    /// Prefixed patterns only, the name (if given) exactly (code 4).
    Prefixed,
}

impl PatternFilter {
    /// Kafka's code: `ANY=1`, `MATCH=2`, `LITERAL=3`, `PREFIXED=4`.
    #[must_use]
    pub fn code(self) -> i32 {
        match self {
            PatternFilter::Any => ANY_CODE,
            PatternFilter::Match => MATCH_CODE,
            PatternFilter::Literal => PatternType::Literal.code(),
            PatternFilter::Prefixed => PatternType::Prefixed.code(),
        }
    }

    /// The pattern filter of a code; `None` for `UNKNOWN` and unknown codes.
    #[must_use]
    pub fn from_code(code: i32) -> Option<PatternFilter> {
        match code {
            ANY_CODE => Some(PatternFilter::Any),
            MATCH_CODE => Some(PatternFilter::Match),
            _ => PatternType::from_code(code).map(PatternFilter::from),
        }
    }
}

impl From<PatternType> for PatternFilter {
    fn from(pattern_type: PatternType) -> PatternFilter {
        match pattern_type {
            PatternType::Literal => PatternFilter::Literal,
            PatternType::Prefixed => PatternFilter::Prefixed,
        }
    }
}

/// Selects ACLs (for `DescribeAcls` and `DeleteAcls`): each field `None`
/// matches any value, `Some` only that value exactly (no `User:*` or `*` host
/// expansion, no implied operations), except [`PatternFilter::Match`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    /// The resource type, or any.
    pub resource_type: Option<ResourceType>,
    /// The resource name, or any (an empty string on the wire).
    pub resource_name: Option<String>,
    /// How the pattern is matched.
    pub pattern: PatternFilter,
    /// The principal exactly, or any (an empty string on the wire).
    pub principal: Option<String>,
    /// The host exactly (canonical), or any (an empty string on the wire).
    pub host: Option<String>,
    /// The operation exactly, or any.
    pub operation: Option<Operation>,
    /// The permission, or any.
    pub permission: Option<Permission>,
}

impl AclFilter {
    /// The filter that matches every ACL.
    #[must_use]
    pub fn any() -> AclFilter {
        AclFilter {
            resource_type: None,
            resource_name: None,
            pattern: PatternFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        }
    }

    /// The filter that matches exactly one binding.
    #[must_use]
    pub fn exact(binding: &AclBinding) -> AclFilter {
        AclFilter {
            resource_type: Some(binding.resource_type),
            resource_name: Some(binding.resource_name.clone()),
            pattern: binding.pattern_type.into(),
            principal: Some(binding.principal.clone()),
            host: Some(binding.host.clone()),
            operation: Some(binding.operation),
            permission: Some(binding.permission),
        }
    }

    /// Validates a filter off the wire: codes are Kafka's or `ANY` (1), the
    /// pattern type also `MATCH` (2); an empty name, principal or host is any;
    /// a principal given must be `User:NAME` or `User:*`, a host `*` or an IP
    /// address.
    pub fn from_pb(pb: &pb::AclBindingFilter) -> Result<AclFilter, AclError> {
        fn or_any<T>(
            field: &'static str,
            code: i32,
            expected: &'static str,
            from_code: fn(i32) -> Option<T>,
        ) -> Result<Option<T>, AclError> {
            if code == ANY_CODE {
                Ok(None)
            } else {
                decode_code(field, code, expected, from_code).map(Some)
            }
        }
        let resource_type = or_any(
            "resource_type",
            pb.resource_type,
            "1 (ANY), 2 (Topic), 3 (Group) or 4 (Cluster)",
            ResourceType::from_code,
        )?;
        let pattern = decode_code(
            "pattern_type",
            pb.pattern_type,
            "1 (ANY), 2 (MATCH), 3 (LITERAL) or 4 (PREFIXED)",
            PatternFilter::from_code,
        )?;
        let operation = or_any(
            "operation",
            pb.operation,
            "1 (ANY) or 2 (All) to 12 (IdempotentWrite)",
            Operation::from_code,
        )?;
        let permission = or_any(
            "permission_type",
            pb.permission_type,
            "1 (ANY), 2 (Deny) or 3 (Allow)",
            Permission::from_code,
        )?;
        let principal = if pb.principal.is_empty() {
            None
        } else {
            validate_principal(&pb.principal)?;
            Some(pb.principal.clone())
        };
        let host = if pb.host.is_empty() {
            None
        } else {
            Some(canonical_host(&pb.host)?)
        };
        let resource_name = (!pb.resource_name.is_empty()).then(|| pb.resource_name.clone());
        Ok(AclFilter {
            resource_type,
            resource_name,
            pattern,
            principal,
            host,
            operation,
            permission,
        })
    }

    /// The filter on the wire.
    #[must_use]
    pub fn to_pb(&self) -> pb::AclBindingFilter {
        pb::AclBindingFilter {
            resource_type: self.resource_type.map_or(ANY_CODE, ResourceType::code),
            resource_name: self.resource_name.clone().unwrap_or_default(),
            pattern_type: self.pattern.code(),
            principal: self.principal.clone().unwrap_or_default(),
            host: self.host.clone().unwrap_or_default(),
            operation: self.operation.map_or(ANY_CODE, Operation::code),
            permission_type: self.permission.map_or(ANY_CODE, Permission::code),
        }
    }

    /// Whether the filter selects `acl`.
    #[must_use]
    pub fn matches(&self, acl: &AclBinding) -> bool {
        fn field<T: PartialEq + ?Sized>(filter: Option<&T>, value: &T) -> bool {
            filter.is_none_or(|f| f == value)
        }
        field(self.resource_type.as_ref(), &acl.resource_type)
            && self.matches_pattern(acl)
            && field(self.principal.as_deref(), acl.principal.as_str())
            && field(self.host.as_deref(), acl.host.as_str())
            && field(self.operation.as_ref(), &acl.operation)
            && field(self.permission.as_ref(), &acl.permission)
    }

    fn matches_pattern(&self, acl: &AclBinding) -> bool {
        let name = self.resource_name.as_deref();
        match self.pattern {
            PatternFilter::Any => name.is_none_or(|n| n == acl.resource_name),
            PatternFilter::Literal | PatternFilter::Prefixed => {
                PatternFilter::from(acl.pattern_type) == self.pattern
                    && name.is_none_or(|n| n == acl.resource_name)
            }
            PatternFilter::Match => name.is_none_or(|n| acl.pattern_covers(n)),
        }
    }
}

/// A set of ACLs, sorted and without duplicates: what a broker authorizes
/// against.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Acls {
    acls: Vec<AclBinding>,
}

impl Acls {
    /// The set of `acls` (sorted, duplicates dropped).
    #[must_use]
    pub fn new(acls: impl IntoIterator<Item = AclBinding>) -> Acls {
        let set: BTreeSet<AclBinding> = acls.into_iter().collect();
        Acls {
            acls: set.into_iter().collect(),
        }
    }

    /// Validates and collects ACLs off the wire; the first invalid one is the
    /// error.
    pub fn from_pb<'a>(
        acls: impl IntoIterator<Item = &'a pb::AclBinding>,
    ) -> Result<Acls, AclError> {
        let acls = acls
            .into_iter()
            .map(AclBinding::from_pb)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Acls::new(acls))
    }

    /// The ACLs on the wire, in order.
    #[must_use]
    pub fn to_pb(&self) -> Vec<pb::AclBinding> {
        self.acls.iter().map(AclBinding::to_pb).collect()
    }

    /// The ACLs, in order.
    pub fn iter(&self) -> impl Iterator<Item = &AclBinding> {
        self.acls.iter()
    }

    /// The ACLs `filter` selects, in order.
    pub fn matching<'a>(
        &'a self,
        filter: &'a AclFilter,
    ) -> impl Iterator<Item = &'a AclBinding> + 'a {
        self.acls.iter().filter(move |acl| filter.matches(acl))
    }

    /// Whether the set holds `acl`.
    #[must_use]
    pub fn contains(&self, acl: &AclBinding) -> bool {
        self.acls.binary_search(acl).is_ok()
    }

    /// How many ACLs.
    #[must_use]
    pub fn len(&self) -> usize {
        self.acls.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.acls.is_empty()
    }
}

impl FromIterator<AclBinding> for Acls {
    fn from_iter<I: IntoIterator<Item = AclBinding>>(iter: I) -> Acls {
        Acls::new(iter)
    }
}

impl<'a> IntoIterator for &'a Acls {
    type Item = &'a AclBinding;
    type IntoIter = std::slice::Iter<'a, AclBinding>;

    fn into_iter(self) -> Self::IntoIter {
        self.acls.iter()
    }
}

/// How a broker's authorizer is configured (`super_users`,
/// `allow_everyone_if_no_acl_found`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Principals allowed everything, ACLs notwithstanding (`User:NAME`).
    pub super_users: Vec<String>,
    /// Whether a resource no ACL applies to is open to everyone (else closed
    /// to all but super users).
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// Whether `principal` is a super user.
    #[must_use]
    pub fn is_super_user(&self, principal: &str) -> bool {
        self.super_users.iter().any(|s| s == principal)
    }
}

/// Parses a `super_users` value as Kafka writes it: principals separated by
/// `;` (`"User:admin;User:ops"`), spaces around each ignored, empty entries
/// skipped. Each must be `User:NAME`; `User:*` is refused.
pub fn parse_super_users(s: &str) -> Result<Vec<String>, AclError> {
    let mut users = Vec::new();
    for entry in s.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        validate_principal(entry)?;
        if entry == "User:*" {
            return Err(AclError::WildcardSuperUser);
        }
        if !users.iter().any(|u| u == entry) {
            users.push(entry.to_owned());
        }
    }
    Ok(users)
}

/// A resource a request acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resource<'a> {
    /// Its type.
    pub resource_type: ResourceType,
    /// Its name ([`CLUSTER_RESOURCE_NAME`] for the cluster).
    pub name: &'a str,
}

impl<'a> Resource<'a> {
    /// The topic `name`.
    #[must_use]
    pub fn topic(name: &'a str) -> Resource<'a> {
        Resource {
            resource_type: ResourceType::Topic,
            name,
        }
    }

    /// The group `name`.
    #[must_use]
    pub fn group(name: &'a str) -> Resource<'a> {
        Resource {
            resource_type: ResourceType::Group,
            name,
        }
    }

    /// The cluster.
    #[must_use]
    pub fn cluster() -> Resource<'static> {
        Resource {
            resource_type: ResourceType::Cluster,
            name: CLUSTER_RESOURCE_NAME,
        }
    }
}

impl fmt::Display for Resource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.resource_type, self.name)
    }
}

/// Whether `principal`, connected from `host`, may perform `op` on
/// `resource`, by Kafka's rules (see the [module](self)): super user -> allow;
/// a matching DENY of `op` or `All` -> deny; a matching ALLOW of `op`, `All`,
/// or an operation implying `op` -> allow; no ACL on the resource at all ->
/// [`AuthorizerConfig::allow_everyone_if_no_acl_found`]; else deny.
#[must_use]
pub fn authorize(
    acls: &Acls,
    config: &AuthorizerConfig,
    principal: &str,
    host: &str,
    op: Operation,
    resource: Resource<'_>,
) -> bool {
    if config.is_super_user(principal) {
        return true;
    }
    let mut resource_has_acls = false;
    let mut allowed = false;
    for acl in acls.iter().filter(|acl| acl.applies_to(resource)) {
        resource_has_acls = true;
        if !acl.concerns(principal, host) {
            continue;
        }
        match acl.permission {
            Permission::Deny if acl.operation.denies(op) => return false,
            Permission::Allow if acl.operation.allows(op) => allowed = true,
            _ => {}
        }
    }
    allowed || (!resource_has_acls && config.allow_everyone_if_no_acl_found)
}

/// Kafka's rule for `InitProducerId` from an idempotent producer (no
/// transactional id): allowed with `IdempotentWrite` on the cluster (by
/// [`authorize`]), or when `principal` may write to some topic, as far as the
/// ACLs tell without the topics' names: an ALLOW `Write` (or `All`) ACL on
/// topics for it that no DENY covers entirely (a literal name not denied by
/// name or by a prefix; a prefix not within a denied prefix); or, with
/// [`AuthorizerConfig::allow_everyone_if_no_acl_found`], when no literal `*`
/// topic ACL exists (so topics no ACL applies to may exist) and no DENY covers
/// every topic for it.
#[must_use]
pub fn may_write_some_topic(
    acls: &Acls,
    config: &AuthorizerConfig,
    principal: &str,
    host: &str,
) -> bool {
    if config.is_super_user(principal)
        || authorize(
            acls,
            config,
            principal,
            host,
            Operation::IdempotentWrite,
            Resource::cluster(),
        )
    {
        return true;
    }
    let topic_acls = || {
        acls.iter()
            .filter(|acl| acl.resource_type == ResourceType::Topic)
    };
    let relevant = || {
        topic_acls().filter(|acl| {
            acl.concerns(principal, host)
                && match acl.permission {
                    Permission::Deny => acl.operation.denies(Operation::Write),
                    Permission::Allow => acl.operation.allows(Operation::Write),
                }
        })
    };
    let with = |p: Permission| relevant().filter(move |acl| acl.permission == p);
    let is_wildcard = |acl: &AclBinding| {
        acl.pattern_type == PatternType::Literal && acl.resource_name == WILDCARD
    };
    if with(Permission::Deny).any(is_wildcard) {
        return false;
    }
    let covered_by_deny = |allow: &AclBinding| {
        with(Permission::Deny).any(|deny| match (deny.pattern_type, allow.pattern_type) {
            (PatternType::Literal, PatternType::Literal) => {
                deny.resource_name == allow.resource_name
            }
            (PatternType::Prefixed, _) => {
                allow.resource_name.starts_with(deny.resource_name.as_str())
            }
            (PatternType::Literal, PatternType::Prefixed) => false,
        })
    };
    if with(Permission::Allow).any(|allow| is_wildcard(allow) || !covered_by_deny(allow)) {
        return true;
    }
    config.allow_everyone_if_no_acl_found && !topic_acls().any(is_wildcard)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An ACL from `"PERMISSION PRINCIPAL OPERATION TYPE:PATTERN:NAME HOST"`,
    /// through [`AclBinding::from_pb`] (so that it is valid).
    fn acl(spec: &str) -> AclBinding {
        let [permission, principal, operation, resource, host] =
            spec.split_whitespace().collect::<Vec<_>>()[..]
        else {
            panic!("bad ACL spec {spec:?}");
        };
        let mut parts = resource.splitn(3, ':');
        let (rt, pattern, name) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let pb = pb::AclBinding {
            resource_type: ResourceType::from_name(rt).unwrap().code(),
            resource_name: name.to_owned(),
            pattern_type: PatternType::from_name(pattern).unwrap().code(),
            principal: principal.to_owned(),
            host: host.to_owned(),
            operation: Operation::from_name(operation).unwrap().code(),
            permission_type: Permission::from_name(permission).unwrap().code(),
        };
        AclBinding::from_pb(&pb).unwrap_or_else(|e| panic!("{spec}: {e}"))
    }

    fn acls(specs: &[&str]) -> Acls {
        specs.iter().map(|s| acl(s)).collect()
    }

    /// `alice` writing to `orders`, as a valid binding on the wire.
    fn alice_writes_orders() -> pb::AclBinding {
        acl("Allow User:alice Write Topic:LITERAL:orders *").to_pb()
    }

    fn resource(spec: &str) -> Resource<'_> {
        let (rt, name) = spec.split_once(':').unwrap();
        Resource {
            resource_type: ResourceType::from_name(rt).unwrap(),
            name,
        }
    }

    #[test]
    fn codes_round_trip_and_match_kafka() {
        let rt: Vec<i32> = ResourceType::ALL.iter().map(|t| t.code()).collect();
        assert_eq!(rt, [2, 3, 4]);
        let pt: Vec<i32> = PatternType::ALL.iter().map(|t| t.code()).collect();
        assert_eq!(pt, [3, 4]);
        let ops: Vec<i32> = Operation::ALL.iter().map(|o| o.code()).collect();
        assert_eq!(ops, (2..=12).collect::<Vec<_>>());
        let perms: Vec<i32> = Permission::ALL.iter().map(|p| p.code()).collect();
        assert_eq!(perms, [2, 3]);
        for code in -2..20 {
            if let Some(t) = ResourceType::from_code(code) {
                assert_eq!(t.code(), code);
            }
            if let Some(t) = PatternType::from_code(code) {
                assert_eq!(t.code(), code);
            }
            if let Some(o) = Operation::from_code(code) {
                assert_eq!(o.code(), code);
            }
            if let Some(p) = Permission::from_code(code) {
                assert_eq!(p.code(), code);
            }
        }
        for unknown in [0, 1] {
            assert_eq!(ResourceType::from_code(unknown), None);
            assert_eq!(Operation::from_code(unknown), None);
            assert_eq!(Permission::from_code(unknown), None);
        }
        assert_eq!(PatternType::from_code(2), None, "MATCH is for filters only");
        assert_eq!(Operation::from_code(13), None);
    }

    #[test]
    fn names_parse_in_every_spelling() {
        let cases: &[(&str, Option<Operation>)] = &[
            ("Read", Some(Operation::Read)),
            ("READ", Some(Operation::Read)),
            ("read", Some(Operation::Read)),
            ("DescribeConfigs", Some(Operation::DescribeConfigs)),
            ("describe-configs", Some(Operation::DescribeConfigs)),
            ("describe_configs", Some(Operation::DescribeConfigs)),
            ("DESCRIBE_CONFIGS", Some(Operation::DescribeConfigs)),
            ("IdempotentWrite", Some(Operation::IdempotentWrite)),
            ("cluster-action", Some(Operation::ClusterAction)),
            ("all", Some(Operation::All)),
            ("any", None),
            ("", None),
            ("Reads", None),
        ];
        for (name, want) in cases {
            assert_eq!(Operation::from_name(name), *want, "{name:?}");
        }
        for o in Operation::ALL {
            assert_eq!(Operation::from_name(o.name()), Some(o));
        }
        assert_eq!(ResourceType::from_name("topic"), Some(ResourceType::Topic));
        assert_eq!(ResourceType::from_name("GROUP"), Some(ResourceType::Group));
        assert_eq!(
            ResourceType::from_name("Cluster"),
            Some(ResourceType::Cluster)
        );
        assert_eq!(ResourceType::from_name("broker"), None);
        assert_eq!(
            PatternType::from_name("literal"),
            Some(PatternType::Literal)
        );
        assert_eq!(
            PatternType::from_name("PREFIXED"),
            Some(PatternType::Prefixed)
        );
        assert_eq!(PatternType::from_name("match"), None);
        assert_eq!(Permission::from_name("ALLOW"), Some(Permission::Allow));
        assert_eq!(Permission::from_name("deny"), Some(Permission::Deny));
        assert_eq!(Permission::from_name("maybe"), None);
    }

    #[test]
    fn operations_valid_per_resource_type() {
        use Operation::*;
        let cases: &[(ResourceType, &[Operation])] = &[
            (
                ResourceType::Topic,
                &[
                    All,
                    Read,
                    Write,
                    Create,
                    Delete,
                    Alter,
                    Describe,
                    DescribeConfigs,
                    AlterConfigs,
                ],
            ),
            (ResourceType::Group, &[All, Read, Describe, Delete]),
            (
                ResourceType::Cluster,
                &[
                    All,
                    Create,
                    Alter,
                    Describe,
                    ClusterAction,
                    DescribeConfigs,
                    AlterConfigs,
                    IdempotentWrite,
                ],
            ),
        ];
        for (rt, valid) in cases {
            for op in Operation::ALL {
                assert_eq!(op.valid_for(*rt), valid.contains(&op), "{op} on {rt}");
                let name = if *rt == ResourceType::Cluster {
                    CLUSTER_RESOURCE_NAME
                } else {
                    "x"
                };
                let pb = pb::AclBinding {
                    resource_type: rt.code(),
                    resource_name: name.to_owned(),
                    pattern_type: 3,
                    principal: "User:alice".to_owned(),
                    host: "*".to_owned(),
                    operation: op.code(),
                    permission_type: 3,
                };
                assert_eq!(
                    AclBinding::from_pb(&pb).is_ok(),
                    valid.contains(&op),
                    "{op} on {rt}"
                );
            }
        }
    }

    #[test]
    fn from_pb_refuses_invalid_bindings() {
        type Mutation = fn(&mut pb::AclBinding);
        let cases: &[(&str, Mutation, &str)] = &[
            ("unknown resource type", |b| b.resource_type = 0, "unknown resource_type code 0"),
            ("ANY resource type", |b| b.resource_type = 1, "unknown resource_type code 1"),
            ("resource type 5", |b| b.resource_type = 5, "unknown resource_type code 5"),
            ("negative resource type", |b| b.resource_type = -1, "resource_type code -1"),
            ("unknown pattern type", |b| b.pattern_type = 0, "unknown pattern_type code 0"),
            ("ANY pattern type", |b| b.pattern_type = 1, "pattern_type code 1"),
            ("MATCH pattern type", |b| b.pattern_type = 2, "pattern_type code 2"),
            ("pattern type 5", |b| b.pattern_type = 5, "pattern_type code 5"),
            ("unknown operation", |b| b.operation = 0, "unknown operation code 0"),
            ("ANY operation", |b| b.operation = 1, "operation code 1"),
            ("operation 13", |b| b.operation = 13, "operation code 13"),
            ("unknown permission", |b| b.permission_type = 0, "permission_type code 0"),
            ("ANY permission", |b| b.permission_type = 1, "permission_type code 1"),
            ("permission 4", |b| b.permission_type = 4, "permission_type code 4"),
            ("bare principal", |b| b.principal = "alice".into(), "invalid principal \"alice\""),
            ("empty principal", |b| b.principal = String::new(), "invalid principal \"\""),
            ("empty user name", |b| b.principal = "User:".into(), "invalid principal"),
            ("other principal type", |b| b.principal = "Group:x".into(), "invalid principal"),
            ("lower-case user", |b| b.principal = "user:alice".into(), "invalid principal"),
            ("host name", |b| b.host = "localhost".into(), "invalid host \"localhost\""),
            ("empty host", |b| b.host = String::new(), "invalid host \"\""),
            ("host with port", |b| b.host = "10.0.0.1:9092".into(), "invalid host"),
            ("empty name", |b| b.resource_name = String::new(), "resource name is empty"),
            (
                "prefixed wildcard",
                |b| {
                    b.pattern_type = 4;
                    b.resource_name = "*".into();
                },
                "prefixed pattern \"*\"",
            ),
            (
                "cluster name",
                |b| {
                    b.resource_type = 4;
                    b.resource_name = "my-cluster".into();
                    b.operation = Operation::Alter.code();
                },
                "the cluster's only name is the literal \"kafka-cluster\"",
            ),
            (
                "prefixed cluster",
                |b| {
                    b.resource_type = 4;
                    b.resource_name = CLUSTER_RESOURCE_NAME.into();
                    b.pattern_type = 4;
                    b.operation = Operation::Alter.code();
                },
                "invalid cluster resource PREFIXED",
            ),
            (
                "wildcard cluster",
                |b| {
                    b.resource_type = 4;
                    b.resource_name = "*".into();
                    b.operation = Operation::Alter.code();
                },
                "invalid cluster resource",
            ),
            (
                "IdempotentWrite on a topic",
                |b| b.operation = Operation::IdempotentWrite.code(),
                "operation IdempotentWrite is not valid for Topic resources (valid: All, Read,",
            ),
            (
                "Write on a group",
                |b| b.resource_type = 3,
                "operation Write is not valid for Group resources (valid: All, Read, Describe, Delete)",
            ),
            (
                "Read on the cluster",
                |b| {
                    b.resource_type = 4;
                    b.resource_name = CLUSTER_RESOURCE_NAME.into();
                    b.operation = Operation::Read.code();
                },
                "operation Read is not valid for Cluster resources",
            ),
        ];
        for (what, mutate, message) in cases {
            let mut pb = alice_writes_orders();
            mutate(&mut pb);
            match AclBinding::from_pb(&pb) {
                Ok(b) => panic!("{what}: accepted {b}"),
                Err(e) => assert!(e.to_string().contains(message), "{what}: {e}"),
            }
        }
    }

    #[test]
    fn from_pb_accepts_valid_bindings() {
        type Mutation = fn(&mut pb::AclBinding);
        let cases: &[(&str, Mutation)] = &[
            ("literal topic", |_| {}),
            ("wildcard principal", |b| b.principal = "User:*".into()),
            ("certificate principal", |b| {
                b.principal = "User:CN=alice,O=x".into()
            }),
            ("literal wildcard", |b| b.resource_name = "*".into()),
            ("prefixed", |b| b.pattern_type = 4),
            ("prefixed starting with *", |b| {
                b.pattern_type = 4;
                b.resource_name = "**".into();
            }),
            ("IPv4 host", |b| b.host = "10.0.0.1".into()),
            ("IPv6 host", |b| b.host = "::1".into()),
            ("deny", |b| b.permission_type = 2),
            ("group", |b| {
                b.resource_type = 3;
                b.operation = Operation::Read.code();
            }),
            ("cluster", |b| {
                b.resource_type = 4;
                b.resource_name = CLUSTER_RESOURCE_NAME.into();
                b.operation = Operation::IdempotentWrite.code();
            }),
        ];
        for (what, mutate) in cases {
            let mut pb = alice_writes_orders();
            mutate(&mut pb);
            let b = AclBinding::from_pb(&pb).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(b.to_pb(), pb, "{what}");
        }
    }

    #[test]
    fn hosts_are_kept_canonical() {
        let mut pb = alice_writes_orders();
        pb.host = "0:0:0:0:0:0:0:1".into();
        let b = AclBinding::from_pb(&pb).unwrap();
        assert_eq!(b.host, "::1");
        assert_eq!(AclBinding::from_pb(&b.to_pb()).unwrap(), b);
    }

    #[test]
    fn display_reads_like_kafka_acls() {
        assert_eq!(
            acl("Allow User:alice Write Topic:LITERAL:orders *").to_string(),
            "User:alice has Allow permission for operation Write on Topic:LITERAL:orders from host *"
        );
        assert_eq!(
            acl("Deny User:* Describe Group:PREFIXED:app- 10.0.0.1").to_string(),
            "User:* has Deny permission for operation Describe on Group:PREFIXED:app- from host 10.0.0.1"
        );
        assert_eq!(Resource::cluster().to_string(), "Cluster:kafka-cluster");
    }

    struct Case {
        what: &'static str,
        acls: &'static [&'static str],
        super_users: &'static [&'static str],
        allow_everyone: bool,
        principal: &'static str,
        host: &'static str,
        op: Operation,
        resource: &'static str,
        allowed: bool,
    }

    const fn case(
        what: &'static str,
        acls: &'static [&'static str],
        principal: &'static str,
        op: Operation,
        resource: &'static str,
        allowed: bool,
    ) -> Case {
        Case {
            what,
            acls,
            super_users: &[],
            allow_everyone: false,
            principal,
            host: "10.0.0.1",
            op,
            resource,
            allowed,
        }
    }

    #[test]
    fn authorize_table() {
        use Operation::*;
        const ALICE: &str = "User:alice";
        const BOB: &str = "User:bob";
        let cases = [
            // Super users.
            Case {
                super_users: &["User:admin"],
                ..case(
                    "super user, no ACLs",
                    &[],
                    "User:admin",
                    Alter,
                    "Cluster:kafka-cluster",
                    true,
                )
            },
            Case {
                super_users: &["User:admin"],
                ..case(
                    "super user beats a deny",
                    &["Deny User:admin All Topic:LITERAL:orders *"],
                    "User:admin",
                    Write,
                    "Topic:orders",
                    true,
                )
            },
            Case {
                super_users: &["User:admin"],
                ..case("not a super user", &[], ALICE, Write, "Topic:orders", false)
            },
            // No ACL on the resource.
            case("no ACLs, closed", &[], ALICE, Read, "Topic:orders", false),
            Case {
                allow_everyone: true,
                ..case("no ACLs, open", &[], ALICE, Read, "Topic:orders", true)
            },
            Case {
                allow_everyone: true,
                ..case(
                    "ACLs on other resources do not count",
                    &[
                        "Allow User:bob Read Topic:LITERAL:payments *",
                        "Deny User:alice All Topic:PREFIXED:pay *",
                        "Allow User:bob Read Group:LITERAL:orders *",
                        "Deny User:alice All Cluster:LITERAL:kafka-cluster *",
                    ],
                    ALICE,
                    Read,
                    "Topic:orders",
                    true,
                )
            },
            case(
                "ACLs on other resources, closed",
                &["Allow User:alice Read Topic:LITERAL:payments *"],
                ALICE,
                Read,
                "Topic:orders",
                false,
            ),
            Case {
                allow_everyone: true,
                ..case(
                    "an ACL for another principal makes the resource closed",
                    &["Allow User:bob Read Topic:LITERAL:orders *"],
                    ALICE,
                    Read,
                    "Topic:orders",
                    false,
                )
            },
            Case {
                allow_everyone: true,
                ..case(
                    "an ACL for another operation makes the resource closed",
                    &["Allow User:alice Write Topic:LITERAL:orders *"],
                    ALICE,
                    Delete,
                    "Topic:orders",
                    false,
                )
            },
            Case {
                allow_everyone: true,
                ..case(
                    "a wildcard ACL makes every topic closed",
                    &["Allow User:bob Read Topic:LITERAL:* *"],
                    ALICE,
                    Read,
                    "Topic:orders",
                    false,
                )
            },
            // Operations.
            case(
                "allow Write allows Write",
                &["Allow User:alice Write Topic:LITERAL:orders *"],
                ALICE,
                Write,
                "Topic:orders",
                true,
            ),
            case(
                "allow Write does not allow Read",
                &["Allow User:alice Write Topic:LITERAL:orders *"],
                ALICE,
                Read,
                "Topic:orders",
                false,
            ),
            case(
                "allow Read implies Describe",
                &["Allow User:alice Read Topic:LITERAL:orders *"],
                ALICE,
                Describe,
                "Topic:orders",
                true,
            ),
            case(
                "allow Write implies Describe",
                &["Allow User:alice Write Topic:LITERAL:orders *"],
                ALICE,
                Describe,
                "Topic:orders",
                true,
            ),
            case(
                "allow Delete implies Describe",
                &["Allow User:alice Delete Group:LITERAL:app *"],
                ALICE,
                Describe,
                "Group:app",
                true,
            ),
            case(
                "allow Alter implies Describe",
                &["Allow User:alice Alter Cluster:LITERAL:kafka-cluster *"],
                ALICE,
                Describe,
                "Cluster:kafka-cluster",
                true,
            ),
            case(
                "allow AlterConfigs implies DescribeConfigs",
                &["Allow User:alice AlterConfigs Topic:LITERAL:orders *"],
                ALICE,
                DescribeConfigs,
                "Topic:orders",
                true,
            ),
            case(
                "allow DescribeConfigs does not imply AlterConfigs",
                &["Allow User:alice DescribeConfigs Topic:LITERAL:orders *"],
                ALICE,
                AlterConfigs,
                "Topic:orders",
                false,
            ),
            case(
                "allow Create does not imply Describe",
                &["Allow User:alice Create Topic:LITERAL:orders *"],
                ALICE,
                Describe,
                "Topic:orders",
                false,
            ),
            case(
                "allow Describe does not imply Read",
                &["Allow User:alice Describe Topic:LITERAL:orders *"],
                ALICE,
                Read,
                "Topic:orders",
                false,
            ),
            case(
                "allow All allows Write",
                &["Allow User:alice All Topic:LITERAL:orders *"],
                ALICE,
                Write,
                "Topic:orders",
                true,
            ),
            case(
                "allow All allows ClusterAction",
                &["Allow User:broker All Cluster:LITERAL:kafka-cluster *"],
                "User:broker",
                ClusterAction,
                "Cluster:kafka-cluster",
                true,
            ),
            // Deny beats allow.
            case(
                "deny Write beats allow All",
                &[
                    "Allow User:alice All Topic:LITERAL:orders *",
                    "Deny User:alice Write Topic:LITERAL:orders *",
                ],
                ALICE,
                Write,
                "Topic:orders",
                false,
            ),
            case(
                "deny Write leaves the rest of allow All",
                &[
                    "Allow User:alice All Topic:LITERAL:orders *",
                    "Deny User:alice Write Topic:LITERAL:orders *",
                ],
                ALICE,
                Read,
                "Topic:orders",
                true,
            ),
            case(
                "deny Read does not deny the Describe allow Read implies",
                &[
                    "Allow User:alice Read Topic:LITERAL:orders *",
                    "Deny User:alice Read Topic:LITERAL:orders *",
                ],
                ALICE,
                Describe,
                "Topic:orders",
                true,
            ),
            case(
                "deny All denies Describe",
                &[
                    "Allow User:alice Describe Topic:LITERAL:orders *",
                    "Deny User:alice All Topic:LITERAL:orders *",
                ],
                ALICE,
                Describe,
                "Topic:orders",
                false,
            ),
            case(
                "a deny on the wildcard beats a literal allow",
                &[
                    "Allow User:alice Read Topic:LITERAL:orders *",
                    "Deny User:alice Read Topic:LITERAL:* *",
                ],
                ALICE,
                Read,
                "Topic:orders",
                false,
            ),
            case(
                "a prefixed deny beats a literal allow",
                &[
                    "Allow User:alice Read Topic:LITERAL:orders *",
                    "Deny User:alice Read Topic:PREFIXED:ord *",
                ],
                ALICE,
                Read,
                "Topic:orders",
                false,
            ),
            // Principals.
            case(
                "User:* allows alice",
                &["Allow User:* Read Topic:LITERAL:orders *"],
                ALICE,
                Read,
                "Topic:orders",
                true,
            ),
            case(
                "User:* allows the anonymous user",
                &["Allow User:* Read Topic:LITERAL:orders *"],
                ANONYMOUS,
                Read,
                "Topic:orders",
                true,
            ),
            case(
                "a deny for User:* beats alice's allow",
                &[
                    "Allow User:alice Read Topic:LITERAL:orders *",
                    "Deny User:* Read Topic:LITERAL:orders *",
                ],
                ALICE,
                Read,
                "Topic:orders",
                false,
            ),
            case(
                "alice's allow is not bob's",
                &["Allow User:alice Read Topic:LITERAL:orders *"],
                BOB,
                Read,
                "Topic:orders",
                false,
            ),
            case(
                "the anonymous user has no ACLs",
                &["Allow User:alice Read Topic:LITERAL:orders *"],
                ANONYMOUS,
                Read,
                "Topic:orders",
                false,
            ),
            // Resource names and patterns.
            case(
                "literal * covers every topic",
                &["Allow User:alice Read Topic:LITERAL:* *"],
                ALICE,
                Read,
                "Topic:anything",
                true,
            ),
            case(
                "a literal * topic ACL does not cover groups",
                &["Allow User:alice Read Topic:LITERAL:* *"],
                ALICE,
                Read,
                "Group:anything",
                false,
            ),
            case(
                "a literal name is exact",
                &["Allow User:alice Read Topic:LITERAL:orders *"],
                ALICE,
                Read,
                "Topic:orders-2",
                false,
            ),
            case(
                "a literal * is not a pattern character",
                &["Allow User:alice Read Topic:LITERAL:ord* *"],
                ALICE,
                Read,
                "Topic:orders",
                false,
            ),
            case(
                "a prefix covers longer names",
                &["Allow User:alice Read Topic:PREFIXED:ord *"],
                ALICE,
                Read,
                "Topic:orders",
                true,
            ),
            case(
                "a prefix covers the name itself",
                &["Allow User:alice Read Topic:PREFIXED:orders *"],
                ALICE,
                Read,
                "Topic:orders",
                true,
            ),
            case(
                "a prefix does not cover other names",
                &["Allow User:alice Read Topic:PREFIXED:ord *"],
                ALICE,
                Read,
                "Topic:payments",
                false,
            ),
            case(
                "a prefix longer than the name does not cover it",
                &["Allow User:alice Read Topic:PREFIXED:orders *"],
                ALICE,
                Read,
                "Topic:ord",
                false,
            ),
            case(
                "a group ACL",
                &["Allow User:alice Read Group:PREFIXED:app- *"],
                ALICE,
                Read,
                "Group:app-1",
                true,
            ),
            Case {
                allow_everyone: true,
                ..case(
                    "a topic ACL does not apply to the group of the same name",
                    &["Deny User:alice All Topic:LITERAL:orders *"],
                    ALICE,
                    Read,
                    "Group:orders",
                    true,
                )
            },
            // Hosts.
            case(
                "the ACL's host",
                &["Allow User:alice Read Topic:LITERAL:orders 10.0.0.1"],
                ALICE,
                Read,
                "Topic:orders",
                true,
            ),
            Case {
                host: "10.0.0.2",
                ..case(
                    "another host",
                    &["Allow User:alice Read Topic:LITERAL:orders 10.0.0.1"],
                    ALICE,
                    Read,
                    "Topic:orders",
                    false,
                )
            },
            Case {
                host: "::ffff:10.0.0.1",
                ..case(
                    "the ACL's host as an IPv4-mapped address",
                    &["Allow User:alice Read Topic:LITERAL:orders 10.0.0.1"],
                    ALICE,
                    Read,
                    "Topic:orders",
                    true,
                )
            },
            Case {
                host: "0:0:0:0:0:0:0:1",
                ..case(
                    "an IPv6 host however spelt",
                    &["Allow User:alice Read Topic:LITERAL:orders ::1"],
                    ALICE,
                    Read,
                    "Topic:orders",
                    true,
                )
            },
            case(
                "a deny from the client's host",
                &[
                    "Allow User:alice Read Topic:LITERAL:orders *",
                    "Deny User:alice Read Topic:LITERAL:orders 10.0.0.1",
                ],
                ALICE,
                Read,
                "Topic:orders",
                false,
            ),
            Case {
                host: "10.0.0.2",
                ..case(
                    "a deny from another host",
                    &[
                        "Allow User:alice Read Topic:LITERAL:orders *",
                        "Deny User:alice Read Topic:LITERAL:orders 10.0.0.1",
                    ],
                    ALICE,
                    Read,
                    "Topic:orders",
                    true,
                )
            },
        ];
        for c in &cases {
            let config = AuthorizerConfig {
                super_users: c.super_users.iter().map(|s| (*s).to_owned()).collect(),
                allow_everyone_if_no_acl_found: c.allow_everyone,
            };
            let got = authorize(
                &acls(c.acls),
                &config,
                c.principal,
                c.host,
                c.op,
                resource(c.resource),
            );
            assert_eq!(got, c.allowed, "{}", c.what);
        }
    }

    #[test]
    fn may_write_some_topic_table() {
        const ALICE: &str = "User:alice";
        let cases: &[(&str, &[&str], bool, bool)] = &[
            ("no ACLs, closed", &[], false, false),
            ("no ACLs, open", &[], true, true),
            (
                "allow Write on a topic",
                &["Allow User:alice Write Topic:LITERAL:orders *"],
                false,
                true,
            ),
            (
                "allow All on a prefix",
                &["Allow User:alice All Topic:PREFIXED:ord *"],
                false,
                true,
            ),
            (
                "allow Write for User:*",
                &["Allow User:* Write Topic:LITERAL:orders *"],
                false,
                true,
            ),
            (
                "allow Read only",
                &["Allow User:alice Read Topic:LITERAL:orders *"],
                false,
                false,
            ),
            (
                "bob's Write",
                &["Allow User:bob Write Topic:LITERAL:orders *"],
                false,
                false,
            ),
            (
                "allow Write from another host",
                &["Allow User:alice Write Topic:LITERAL:orders 10.9.9.9"],
                false,
                false,
            ),
            (
                "IdempotentWrite on the cluster",
                &["Allow User:alice IdempotentWrite Cluster:LITERAL:kafka-cluster *"],
                false,
                true,
            ),
            (
                "the same topic denied",
                &[
                    "Allow User:alice Write Topic:LITERAL:orders *",
                    "Deny User:alice Write Topic:LITERAL:orders *",
                ],
                false,
                false,
            ),
            (
                "another topic denied",
                &[
                    "Allow User:alice Write Topic:LITERAL:orders *",
                    "Deny User:alice Write Topic:LITERAL:payments *",
                ],
                false,
                true,
            ),
            (
                "a literal allow within a denied prefix",
                &[
                    "Allow User:alice Write Topic:LITERAL:orders *",
                    "Deny User:alice All Topic:PREFIXED:ord *",
                ],
                false,
                false,
            ),
            (
                "a prefix allow within a denied prefix",
                &[
                    "Allow User:alice Write Topic:PREFIXED:orders *",
                    "Deny User:alice Write Topic:PREFIXED:ord *",
                ],
                false,
                false,
            ),
            (
                "a prefix allow wider than the denied prefix",
                &[
                    "Allow User:alice Write Topic:PREFIXED:ord *",
                    "Deny User:alice Write Topic:PREFIXED:orders-eu *",
                ],
                false,
                true,
            ),
            (
                "every topic denied",
                &[
                    "Allow User:alice Write Topic:LITERAL:orders *",
                    "Deny User:* Write Topic:LITERAL:* *",
                ],
                false,
                false,
            ),
            (
                "every topic denied, open, the cluster closed",
                &[
                    "Allow User:bob IdempotentWrite Cluster:LITERAL:kafka-cluster *",
                    "Deny User:* Write Topic:LITERAL:* *",
                ],
                true,
                false,
            ),
            (
                "no cluster ACL, open: IdempotentWrite on the cluster",
                &["Deny User:* Write Topic:LITERAL:* *"],
                true,
                true,
            ),
            (
                "a deny of Read leaves Write",
                &[
                    "Allow User:alice Write Topic:LITERAL:orders *",
                    "Deny User:alice Read Topic:LITERAL:orders *",
                ],
                false,
                true,
            ),
            (
                "open, cluster ACLs, topics without ACLs may exist",
                &["Allow User:bob IdempotentWrite Cluster:LITERAL:kafka-cluster *"],
                true,
                true,
            ),
            (
                "open, cluster ACLs, every topic has ACLs",
                &[
                    "Allow User:bob IdempotentWrite Cluster:LITERAL:kafka-cluster *",
                    "Allow User:bob Write Topic:LITERAL:* *",
                ],
                true,
                false,
            ),
        ];
        for (what, specs, allow_everyone, want) in cases {
            let config = AuthorizerConfig {
                super_users: vec![],
                allow_everyone_if_no_acl_found: *allow_everyone,
            };
            assert_eq!(
                may_write_some_topic(&acls(specs), &config, ALICE, "10.0.0.1"),
                *want,
                "{what}"
            );
        }
        let config = AuthorizerConfig {
            super_users: vec![ALICE.to_owned()],
            allow_everyone_if_no_acl_found: false,
        };
        let denied = acls(&["Deny User:alice All Cluster:LITERAL:kafka-cluster *"]);
        assert!(
            may_write_some_topic(&denied, &config, ALICE, "10.0.0.1"),
            "a super user"
        );
    }

    #[test]
    fn parse_super_users_cases() {
        let ok: &[(&str, &[&str])] = &[
            ("", &[]),
            ("User:admin", &["User:admin"]),
            ("User:admin;User:ops", &["User:admin", "User:ops"]),
            (" User:admin ; ;User:ops; ", &["User:admin", "User:ops"]),
            ("User:admin;User:admin", &["User:admin"]),
            ("User:CN=broker,O=x", &["User:CN=broker,O=x"]),
        ];
        for (s, want) in ok {
            assert_eq!(parse_super_users(s).unwrap(), *want, "{s:?}");
        }
        assert_eq!(
            parse_super_users("admin"),
            Err(AclError::Principal("admin".into()))
        );
        assert_eq!(
            parse_super_users("User:a,User:b").unwrap(),
            ["User:a,User:b"]
        );
        assert_eq!(
            parse_super_users("User:a;User:"),
            Err(AclError::Principal("User:".into()))
        );
        assert_eq!(
            parse_super_users("User:*"),
            Err(AclError::WildcardSuperUser)
        );
        let config = AuthorizerConfig {
            super_users: parse_super_users("User:admin;User:ops").unwrap(),
            allow_everyone_if_no_acl_found: false,
        };
        assert!(config.is_super_user("User:ops"));
        assert!(!config.is_super_user("User:alice"));
        assert!(!config.is_super_user("ops"));
    }

    fn filter(f: fn(&mut pb::AclBindingFilter)) -> AclFilter {
        let mut pb = AclFilter::any().to_pb();
        f(&mut pb);
        AclFilter::from_pb(&pb).unwrap()
    }

    #[test]
    fn filter_any_matches_everything() {
        let pb = pb::AclBindingFilter {
            resource_type: 1,
            resource_name: String::new(),
            pattern_type: 1,
            principal: String::new(),
            host: String::new(),
            operation: 1,
            permission_type: 1,
        };
        assert_eq!(AclFilter::any().to_pb(), pb);
        assert_eq!(AclFilter::from_pb(&pb).unwrap(), AclFilter::any());
        for spec in [
            "Allow User:alice Write Topic:LITERAL:orders *",
            "Deny User:* All Group:PREFIXED:g 10.0.0.1",
            "Allow User:bob Alter Cluster:LITERAL:kafka-cluster ::1",
        ] {
            assert!(AclFilter::any().matches(&acl(spec)), "{spec}");
        }
    }

    #[test]
    fn filter_table() {
        let all = [
            "Allow User:alice Read Topic:LITERAL:orders *",    // 0
            "Allow User:alice Read Topic:LITERAL:orders-2 *",  // 1
            "Allow User:alice Read Topic:LITERAL:* *",         // 2
            "Allow User:alice Read Topic:PREFIXED:ord *",      // 3
            "Allow User:alice Read Topic:PREFIXED:orders *",   // 4
            "Allow User:alice Read Topic:PREFIXED:orders- *",  // 5
            "Allow User:alice Read Group:LITERAL:orders *",    // 6
            "Deny User:* Write Topic:LITERAL:orders 10.0.0.1", // 7
            "Allow User:bob Describe Topic:LITERAL:payments ::1", // 8
        ];
        type Edit = fn(&mut pb::AclBindingFilter);
        let cases: &[(&str, Edit, &[usize])] = &[
            ("any", |_| {}, &[0, 1, 2, 3, 4, 5, 6, 7, 8]),
            ("topics", |f| f.resource_type = 2, &[0, 1, 2, 3, 4, 5, 7, 8]),
            ("groups", |f| f.resource_type = 3, &[6]),
            (
                "any pattern, exact name",
                |f| f.resource_name = "orders".into(),
                &[0, 4, 6, 7],
            ),
            (
                "literal patterns",
                |f| f.pattern_type = 3,
                &[0, 1, 2, 6, 7, 8],
            ),
            (
                "literal, exact name",
                |f| {
                    f.pattern_type = 3;
                    f.resource_name = "orders".into();
                },
                &[0, 6, 7],
            ),
            ("prefixed patterns", |f| f.pattern_type = 4, &[3, 4, 5]),
            (
                "prefixed, exact name",
                |f| {
                    f.pattern_type = 4;
                    f.resource_name = "ord".into();
                },
                &[3],
            ),
            (
                "literal *, exactly",
                |f| {
                    f.pattern_type = 3;
                    f.resource_name = "*".into();
                },
                &[2],
            ),
            (
                "MATCH orders on topics",
                |f| {
                    f.resource_type = 2;
                    f.pattern_type = 2;
                    f.resource_name = "orders".into();
                },
                &[0, 2, 3, 4, 7],
            ),
            (
                "MATCH orders-2",
                |f| {
                    f.pattern_type = 2;
                    f.resource_name = "orders-2".into();
                },
                &[1, 2, 3, 4, 5],
            ),
            (
                "MATCH without a name",
                |f| f.pattern_type = 2,
                &[0, 1, 2, 3, 4, 5, 6, 7, 8],
            ),
            (
                "principal exactly",
                |f| f.principal = "User:alice".into(),
                &[0, 1, 2, 3, 4, 5, 6],
            ),
            ("User:* exactly", |f| f.principal = "User:*".into(), &[7]),
            ("host exactly", |f| f.host = "10.0.0.1".into(), &[7]),
            (
                "host * exactly",
                |f| f.host = "*".into(),
                &[0, 1, 2, 3, 4, 5, 6],
            ),
            ("host canonical", |f| f.host = "0::1".into(), &[8]),
            (
                "operation exactly",
                |f| f.operation = Operation::Write.code(),
                &[7],
            ),
            (
                "All is an operation",
                |f| f.operation = Operation::All.code(),
                &[],
            ),
            ("deny", |f| f.permission_type = 2, &[7]),
            (
                "everything given",
                |f| {
                    *f = acl("Allow User:bob Describe Topic:LITERAL:payments ::1")
                        .to_pb()
                        .into_filter();
                },
                &[8],
            ),
        ];
        let bindings: Vec<AclBinding> = all.iter().map(|s| acl(s)).collect();
        for (what, edit, want) in cases {
            let f = filter(*edit);
            let got: Vec<usize> = (0..bindings.len())
                .filter(|i| f.matches(&bindings[*i]))
                .collect();
            assert_eq!(got, *want, "{what}");
            let set = Acls::new(bindings.clone());
            assert_eq!(set.matching(&f).count(), want.len(), "{what}");
        }
    }

    trait IntoFilter {
        fn into_filter(self) -> pb::AclBindingFilter;
    }

    impl IntoFilter for pb::AclBinding {
        fn into_filter(self) -> pb::AclBindingFilter {
            pb::AclBindingFilter {
                resource_type: self.resource_type,
                resource_name: self.resource_name,
                pattern_type: self.pattern_type,
                principal: self.principal,
                host: self.host,
                operation: self.operation,
                permission_type: self.permission_type,
            }
        }
    }

    #[test]
    fn filter_from_pb_refuses_invalid_filters() {
        type Edit = fn(&mut pb::AclBindingFilter);
        let cases: &[(&str, Edit, &str)] = &[
            (
                "unknown resource type",
                |f| f.resource_type = 0,
                "unknown resource_type code 0",
            ),
            (
                "resource type 5",
                |f| f.resource_type = 5,
                "resource_type code 5",
            ),
            (
                "unknown pattern type",
                |f| f.pattern_type = 0,
                "pattern_type code 0",
            ),
            (
                "pattern type 5",
                |f| f.pattern_type = 5,
                "pattern_type code 5",
            ),
            ("unknown operation", |f| f.operation = 0, "operation code 0"),
            ("operation 13", |f| f.operation = 13, "operation code 13"),
            (
                "unknown permission",
                |f| f.permission_type = 0,
                "permission_type code 0",
            ),
            (
                "permission 4",
                |f| f.permission_type = 4,
                "permission_type code 4",
            ),
            (
                "bare principal",
                |f| f.principal = "alice".into(),
                "invalid principal",
            ),
            ("host name", |f| f.host = "localhost".into(), "invalid host"),
        ];
        for (what, edit, message) in cases {
            let mut pb = AclFilter::any().to_pb();
            edit(&mut pb);
            match AclFilter::from_pb(&pb) {
                Ok(f) => panic!("{what}: accepted {f:?}"),
                Err(e) => assert!(e.to_string().contains(message), "{what}: {e}"),
            }
        }
    }

    #[test]
    fn acls_are_sorted_and_deduplicated() {
        let a = acl("Allow User:alice Read Topic:LITERAL:orders *");
        let b = acl("Allow User:alice Read Group:LITERAL:app *");
        let c = acl("Deny User:bob Read Topic:LITERAL:orders *");
        let set = Acls::new([c.clone(), a.clone(), b.clone(), a.clone()]);
        assert_eq!(set.len(), 3);
        assert!(!set.is_empty());
        assert!(set.iter().zip(set.iter().skip(1)).all(|(x, y)| x < y));
        assert!(set.contains(&a) && set.contains(&b) && set.contains(&c));
        assert!(!set.contains(&acl("Allow User:carol Read Topic:LITERAL:orders *")));
        assert_eq!(set, Acls::new([a.clone(), b.clone(), c.clone()]));
        assert_eq!(Acls::from_pb(&set.to_pb()).unwrap(), set);
        assert!(Acls::default().is_empty());
        let mut bad = a.to_pb();
        bad.host = "example.com".into();
        assert_eq!(
            Acls::from_pb(&[a.to_pb(), bad]),
            Err(AclError::Host("example.com".into()))
        );
        assert_eq!((&set).into_iter().count(), 3);
    }

    fn arb_binding() -> impl Strategy<Value = AclBinding> {
        let resource = prop::sample::select(ResourceType::ALL.to_vec()).prop_flat_map(|rt| {
            (
                Just(rt),
                prop::sample::select(rt.operations().to_vec()),
                prop::sample::select(PatternType::ALL.to_vec()),
                "[a-c*]{1,4}",
            )
        });
        let host = prop_oneof![
            Just("*".to_owned()),
            any::<IpAddr>().prop_map(|ip| ip.to_string())
        ];
        (
            resource,
            "User:(\\*|[a-c]{1,3})",
            host,
            prop::sample::select(Permission::ALL.to_vec()),
        )
            .prop_map(|((rt, op, pattern, name), principal, host, permission)| {
                let (pattern_type, resource_name) = match rt {
                    ResourceType::Cluster => {
                        (PatternType::Literal, CLUSTER_RESOURCE_NAME.to_owned())
                    }
                    _ if name == "*" => (PatternType::Literal, name),
                    _ => (pattern, name),
                };
                AclBinding {
                    resource_type: rt,
                    resource_name,
                    pattern_type,
                    principal,
                    host,
                    operation: op,
                    permission,
                }
            })
    }

    fn arb_pb_binding() -> impl Strategy<Value = pb::AclBinding> {
        (
            -1..7i32,
            prop_oneof![
                Just(CLUSTER_RESOURCE_NAME.to_owned()),
                "[a*]{0,3}",
                any::<String>()
            ],
            -1..7i32,
            prop_oneof!["User:(\\*|[a-c]{0,3})", any::<String>()],
            prop_oneof![
                Just("*".to_owned()),
                Just("::ffff:1.2.3.4".to_owned()),
                any::<IpAddr>().prop_map(|ip| ip.to_string()),
                any::<String>()
            ],
            -1..15i32,
            -1..5i32,
        )
            .prop_map(
                |(
                    resource_type,
                    resource_name,
                    pattern_type,
                    principal,
                    host,
                    operation,
                    permission_type,
                )| {
                    pb::AclBinding {
                        resource_type,
                        resource_name,
                        pattern_type,
                        principal,
                        host,
                        operation,
                        permission_type,
                    }
                },
            )
    }

    /// A literal ACL on exactly `resource` for `principal` from any host.
    fn binding_for(
        principal: &str,
        op: Operation,
        resource: Resource<'_>,
        permission: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: resource.resource_type,
            resource_name: resource.name.to_owned(),
            pattern_type: PatternType::Literal,
            principal: principal.to_owned(),
            host: "*".to_owned(),
            operation: op,
            permission,
        }
    }

    proptest! {
        #[test]
        fn valid_bindings_round_trip(b in arb_binding()) {
            prop_assert_eq!(AclBinding::from_pb(&b.to_pb()), Ok(b.clone()));
            prop_assert!(AclFilter::exact(&b).matches(&b));
            prop_assert_eq!(AclFilter::from_pb(&AclFilter::exact(&b).to_pb()), Ok(AclFilter::exact(&b)));
        }

        #[test]
        fn hostile_bindings_validate_or_round_trip(pb in arb_pb_binding()) {
            if let Ok(b) = AclBinding::from_pb(&pb) {
                prop_assert_eq!(AclBinding::from_pb(&b.to_pb()), Ok(b.clone()));
                prop_assert!(b.operation.valid_for(b.resource_type));
                prop_assert!(AclFilter::exact(&b).matches(&b));
            }
        }

        #[test]
        fn acls_ignore_order_and_duplicates(mut bindings in prop::collection::vec(arb_binding(), 0..12)) {
            let set = Acls::new(bindings.clone());
            bindings.reverse();
            bindings.extend(bindings.clone());
            prop_assert_eq!(&Acls::new(bindings), &set);
            prop_assert!(set.iter().zip(set.iter().skip(1)).all(|(x, y)| x < y));
        }

        #[test]
        fn authorize_invariants(
            bindings in prop::collection::vec(arb_binding(), 0..12),
            who in "User:[a-c]{1,3}",
            host in prop_oneof![Just("10.0.0.1".to_owned()), any::<IpAddr>().prop_map(|ip| ip.to_string())],
            rt in prop::sample::select(ResourceType::ALL.to_vec()),
            name in "[a-c*]{1,4}",
            op_index in any::<prop::sample::Index>(),
            allow_everyone in any::<bool>(),
        ) {
            let op = *op_index.get(rt.operations());
            let name = if rt == ResourceType::Cluster { CLUSTER_RESOURCE_NAME.to_owned() } else { name };
            let resource = Resource { resource_type: rt, name: &name };
            let acls = Acls::new(bindings.clone());
            let open = AuthorizerConfig { super_users: vec![], allow_everyone_if_no_acl_found: allow_everyone };
            let allowed = authorize(&acls, &open, &who, &host, op, resource);
            // A super user is always allowed.
            let sup = AuthorizerConfig { super_users: vec![who.clone()], ..open.clone() };
            prop_assert!(authorize(&acls, &sup, &who, &host, op, resource));
            // No applying ACL: the default decides.
            if !acls.iter().any(|a| a.applies_to(resource)) {
                prop_assert_eq!(allowed, allow_everyone);
            }
            // A matching deny always denies.
            let deny = binding_for(&who, op, resource, Permission::Deny);
            let denied = Acls::new(bindings.iter().cloned().chain([deny]));
            prop_assert!(!authorize(&denied, &open, &who, &host, op, resource));
            // A matching allow allows unless something denies.
            let allow = binding_for(&who, op, resource, Permission::Allow);
            let with_allow = Acls::new(bindings.iter().cloned().chain([allow]));
            let any_deny = bindings.iter().any(|a| {
                a.permission == Permission::Deny && a.applies_to(resource)
                    && a.concerns(&who, &host) && a.operation.denies(op)
            });
            prop_assert_eq!(authorize(&with_allow, &open, &who, &host, op, resource), !any_deny);
        }
    }
}
