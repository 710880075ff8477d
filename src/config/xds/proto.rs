//! The `RateLimitConfig` resource as it travels over xDS: envoyproxy/ratelimit's
//! `ratelimit.config.ratelimit.v3` messages (`api/ratelimit/config/ratelimit/v3/rls_conf.proto`),
//! written from the wire facts (package, names, field numbers), not generated.
//!
//! Wire shape only: every field the proto has, nothing decided here. `xds::convert` turns a
//! decoded resource into the YAML the file loader compiles.

/// The `type_url` of the resource in `DiscoveryRequest`s and in each response `Any`.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// One xDS resource: the policies of one domain (`name` identifies the resource).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct RateLimitConfig {
    /// The resource name (Envoy Gateway uses the domain); errors name the resource by it.
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub domain: String,
    #[prost(message, repeated, tag = "3")]
    pub descriptors: Vec<RateLimitDescriptor>,
}

/// One node of the descriptor tree.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct RateLimitDescriptor {
    #[prost(string, tag = "1")]
    pub key: String,
    /// `""` is the value-less default node.
    #[prost(string, tag = "2")]
    pub value: String,
    /// Absent: no limit at this level.
    #[prost(message, optional, tag = "3")]
    pub rate_limit: Option<RateLimitPolicy>,
    #[prost(message, repeated, tag = "4")]
    pub descriptors: Vec<RateLimitDescriptor>,
    #[prost(bool, tag = "5")]
    pub shadow_mode: bool,
    #[prost(bool, tag = "6")]
    pub detailed_metric: bool,
    #[prost(bool, tag = "7")]
    pub quota_mode: bool,
    #[prost(message, optional, tag = "8")]
    pub metadata: Option<prost_types::Struct>,
}

/// A node's limit.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct RateLimitPolicy {
    /// A [`RateLimitUnit`]; an unknown number stays a number (and is refused).
    #[prost(enumeration = "RateLimitUnit", tag = "1")]
    pub unit: i32,
    #[prost(uint32, tag = "2")]
    pub requests_per_unit: u32,
    #[prost(bool, tag = "3")]
    pub unlimited: bool,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(message, repeated, tag = "5")]
    pub replaces: Vec<RateLimitReplace>,
}

/// One entry of `replaces`: the name of the replaced limit.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct RateLimitReplace {
    #[prost(string, tag = "1")]
    pub name: String,
}

/// The proto's units, with its numbers (WEEK is 7, after MONTH and YEAR).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Enumeration)]
#[repr(i32)]
pub enum RateLimitUnit {
    Unknown = 0,
    Second = 1,
    Minute = 2,
    Hour = 3,
    Day = 4,
    Week = 7,
    Month = 5,
    Year = 6,
}

impl RateLimitUnit {
    /// The unit's name in Tollgate's YAML (`second` … `year`); `None` for `UNKNOWN`.
    pub fn yaml_name(self) -> Option<&'static str> {
        match self {
            RateLimitUnit::Unknown => None,
            RateLimitUnit::Second => Some("second"),
            RateLimitUnit::Minute => Some("minute"),
            RateLimitUnit::Hour => Some("hour"),
            RateLimitUnit::Day => Some("day"),
            RateLimitUnit::Week => Some("week"),
            RateLimitUnit::Month => Some("month"),
            RateLimitUnit::Year => Some("year"),
        }
    }
}
