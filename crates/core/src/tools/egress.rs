//! Where a code tool's `ctx.http_get` may go: its `egress` allowlist of origins, checked by
//! one function on every save (create, edit, duplicate, restore, import, and the desktop
//! editor's live check).
//!
//! An origin is `http[s]://host[:port]`, and a tool lists at most [`MAX_EGRESS_ORIGINS`]. An
//! origin that reaches this machine or the networks around it (loopback, private, link-local,
//! shared and unspecified addresses, `localhost`, names only a local resolver answers, cloud
//! metadata hosts) is refused unless the administrator confirms it
//! ([`SaveOptions::allow_private_egress`]; `quarry tools … --allow-private-egress`): a tool file
//! someone sent could otherwise read `http://169.254.169.254` (cloud credentials) or a
//! service bound to loopback (issue 38). An origin the tool's saved definition already lists
//! stays accepted, so editing its other fields asks for no confirmation again.
//!
//! Only what is written is checked: a public name whose DNS answer is a private address is not
//! caught here.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::invalid;
use crate::error::Result;

/// Most origins one tool may list. Real tools name a handful; an import with 200,000 was
/// stored whole and checked on every call.
pub const MAX_EGRESS_ORIGINS: usize = 64;

/// Longest origin: a 253-character host name, a scheme and a port.
const MAX_ORIGIN_CHARS: usize = 300;

/// Cloud metadata services reached by name (the addresses are refused as link-local or
/// private anyway).
const METADATA_HOSTS: &[&str] = &[
    "metadata.google.internal",
    "metadata.goog",
    "metadata.tencentyun.com",
];

/// Domains that only a local resolver answers (RFC 6762 `.local`, RFC 8375 `.home.arpa`, the
/// ICANN-reserved `.internal`, and the common `.localdomain`, `.lan`).
const LOCAL_DOMAINS: &[&str] = &[".local", ".internal", ".home.arpa", ".localdomain", ".lan"];

/// What the administrator confirmed for a save, beyond what a tool definition may do on its
/// own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SaveOptions {
    /// `egress` may name origins on this machine or its networks (loopback, private,
    /// link-local, metadata hosts). Default `false`: such an origin is refused unless the
    /// tool's saved definition already lists it. Confirmed saves are audited.
    pub allow_private_egress: bool,
}

/// Checks a tool's egress list: its length, each origin's form, and that an origin on this
/// machine or its networks is confirmed (listed in `confirmed`, the saved definition's origins,
/// or allowed by `options`).
pub(crate) fn validate_egress(
    tool: &str,
    origins: &[String],
    confirmed: &[String],
    options: SaveOptions,
) -> Result<()> {
    if origins.len() > MAX_EGRESS_ORIGINS {
        return Err(invalid(
            tool,
            "egress",
            format!(
                "lists {} origins; a tool may list at most {MAX_EGRESS_ORIGINS}",
                origins.len()
            ),
        ));
    }
    for origin in origins {
        let Some(reason) = private_reason(tool, origin)? else {
            continue;
        };
        let already = confirmed.iter().any(|c| c.eq_ignore_ascii_case(origin));
        if !options.allow_private_egress && !already {
            return Err(invalid(
                tool,
                "egress",
                format!(
                    "names `{origin}`, {reason}; a tool reaches this machine or its networks only \
                     when the administrator confirms it (`quarry tools import|create|edit … \
                     --allow-private-egress`)"
                ),
            ));
        }
    }
    Ok(())
}

/// The origins in `origins` that reach this machine or its networks (for the audit record of
/// a confirmed save). Malformed ones are left out: saving refuses them anyway.
pub(crate) fn private_origins(origins: &[String]) -> Vec<String> {
    origins
        .iter()
        .filter(|o| matches!(private_reason("", o), Ok(Some(_))))
        .cloned()
        .collect()
}

/// Why `origin` reaches this machine or its networks (`None`: it does not), or an error when it
/// is not an origin at all.
fn private_reason(tool: &str, origin: &str) -> Result<Option<&'static str>> {
    let malformed = |why: &str| {
        invalid(
            tool,
            "egress",
            format!(
                "`{origin}` is not an origin like `https://example.com` or \
                 `http://203.0.113.7:8080` ({why})"
            ),
        )
    };
    if origin.chars().count() > MAX_ORIGIN_CHARS {
        return Err(malformed("too long"));
    }
    let authority = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
        .ok_or_else(|| malformed("it starts with neither http:// nor https://"))?;
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let (inside, after) = bracketed
                .split_once(']')
                .ok_or_else(|| malformed("an unclosed `[`"))?;
            let ip: Ipv6Addr = inside
                .parse()
                .map_err(|_| malformed("not an IPv6 address in the brackets"))?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| malformed("text after `]`"))?,
                ),
            };
            check_port(port).map_err(malformed)?;
            return Ok(ipv6_reason(ip));
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    check_port(port).map_err(malformed)?;
    if host.is_empty() {
        return Err(malformed("no host"));
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err(malformed(
            "a host is letters, digits, `-`, `_` and `.`; write an international name in its \
             xn-- form",
        ));
    }
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    // A numeric last label makes the host an IPv4 address to resolvers, which also read
    // `127.1`, `2130706433` and `0x7f.0.0.1` as 127.0.0.1: only the dotted-decimal form is
    // accepted, so the check below sees the address that will be used.
    let last = name.rsplit('.').next().unwrap_or_default();
    let numeric =
        !last.is_empty() && (last.bytes().all(|b| b.is_ascii_digit()) || last.starts_with("0x"));
    if numeric {
        let ip: Ipv4Addr = host
            .parse()
            .map_err(|_| malformed("an IPv4 address is written as four decimal numbers"))?;
        return Ok(ipv4_reason(ip));
    }
    Ok(name_reason(&name))
}

/// An optional port: 1 to 65535, digits only.
fn check_port(port: Option<&str>) -> std::result::Result<(), &'static str> {
    match port {
        None => Ok(()),
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            match p.parse::<u32>() {
                Ok(1..=65_535) => Ok(()),
                _ => Err("a port is 1 to 65535"),
            }
        }
        Some(_) => Err("a port is 1 to 65535, with nothing after it (no path)"),
    }
}

fn ipv4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(if a == 0 {
        "an unspecified address (this machine)"
    } else if ip.is_loopback() {
        "a loopback address (this machine)"
    } else if ip.is_link_local() {
        "a link-local address (where cloud metadata services answer)"
    } else if ip.is_private() {
        "a private-network address"
    } else if a == 100 && (b & 0xc0) == 64 {
        "a shared (carrier-grade NAT) address, where some clouds serve metadata"
    } else if a == 192 && b == 0 && c == 0 {
        "an IETF special-purpose address, where some clouds serve metadata"
    } else if ip.is_broadcast() || ip.is_multicast() || a >= 240 {
        "not a unicast internet address"
    } else {
        return None;
    })
}

fn ipv6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    // An IPv4 address inside: mapped (::ffff:a.b.c.d), compatible (::a.b.c.d), NAT64
    // (64:ff9b::a.b.c.d).
    let embedded = Ipv4Addr::from(u128::from(ip) as u32);
    if ip.to_ipv4_mapped().is_some()
        || (s[..6] == [0; 6] && !ip.is_loopback() && !ip.is_unspecified())
        || (s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4])
    {
        return ipv4_reason(embedded);
    }
    Some(if ip.is_unspecified() {
        "an unspecified address (this machine)"
    } else if ip.is_loopback() {
        "a loopback address (this machine)"
    } else if (s[0] & 0xffc0) == 0xfe80 {
        "a link-local address"
    } else if (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfec0 {
        "a private-network address"
    } else if ip.is_multicast() {
        "not a unicast internet address"
    } else {
        return None;
    })
}

fn name_reason(name: &str) -> Option<&'static str> {
    Some(if name == "localhost" || name.ends_with(".localhost") {
        "a loopback name (this machine)"
    } else if METADATA_HOSTS.contains(&name) {
        "a cloud metadata service"
    } else if !name.contains('.') {
        "a single-label name, which the local network resolves"
    } else if LOCAL_DOMAINS.iter().any(|d| name.ends_with(d)) {
        "a name only the local network resolves"
    } else {
        return None;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(origin: &str) -> Option<&'static str> {
        private_reason("t", origin).unwrap_or_else(|e| panic!("{origin}: {e}"))
    }

    #[test]
    fn public_origins_pass() {
        for origin in [
            "https://example.com",
            "https://api.example.com:8443",
            "http://203.0.113.7:8080",
            "https://8.8.8.8",
            "https://[2001:db8::1]:443",
            "https://xn--bcher-kva.example",
            "https://example.com.",
        ] {
            assert_eq!(reason(origin), None, "{origin}");
        }
    }

    #[test]
    fn this_machine_and_its_networks_are_recognised() {
        for origin in [
            "http://169.254.169.254",
            "http://127.0.0.1",
            "http://127.0.0.1:8080",
            "http://127.8.9.10",
            "http://0.0.0.0:80",
            "http://10.1.2.3",
            "http://172.16.0.1",
            "http://172.31.255.255",
            "http://192.168.1.1",
            "http://100.100.100.200",
            "http://192.0.0.192",
            "http://255.255.255.255",
            "http://224.0.0.1",
            "http://[::1]",
            "http://[::]:8080",
            "http://[fe80::1]",
            "http://[fd00:ec2::254]",
            "http://[fc00::1]",
            "http://[::ffff:127.0.0.1]",
            "http://[::ffff:169.254.169.254]",
            "http://[::127.0.0.1]",
            "http://[64:ff9b::a9fe:a9fe]",
            "http://localhost",
            "http://LOCALHOST:3000",
            "http://localhost.",
            "http://app.localhost",
            "http://metadata.google.internal",
            "http://metadata.goog",
            "http://metadata",
            "http://intranet",
            "http://printer.local",
            "http://nas.home.arpa",
        ] {
            assert!(reason(origin).is_some(), "{origin} passed as public");
        }
        assert!(reason("http://169.254.169.254")
            .unwrap()
            .contains("link-local"));
        assert!(reason("http://127.0.0.1").unwrap().contains("loopback"));
        assert!(reason("http://192.168.1.1").unwrap().contains("private"));
    }

    #[test]
    fn other_spellings_of_an_address_are_refused_as_malformed() {
        for origin in [
            "http://2130706433",
            "http://127.1",
            "http://0x7f.0.0.1",
            "http://0177.0.0.1",
            "http://127.0.0.1.",
            "http://%31%32%37.0.0.1",
            "http://[fe80::1%25eth0]",
            "http://[::1",
            "http://example.com:0",
            "http://example.com:65536",
            "http://example.com:80/path",
            "http://user@example.com",
            "http://",
            "ftp://example.com",
            "http://exa mple.com",
            "http://ｅxample.com",
        ] {
            assert!(
                private_reason("t", origin).is_err(),
                "{origin} was accepted"
            );
        }
        let long = format!("https://{}.com", "a".repeat(400));
        assert!(private_reason("t", &long).is_err());
    }

    #[test]
    fn confirmation_or_an_already_saved_origin_lets_a_private_origin_through() {
        let origins = [
            "https://example.com".to_string(),
            "http://127.0.0.1:11434".into(),
        ];
        let err = validate_egress("t", &origins, &[], SaveOptions::default()).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("`http://127.0.0.1:11434`"), "{message}");
        assert!(message.contains("--allow-private-egress"), "{message}");
        let confirmed = SaveOptions {
            allow_private_egress: true,
        };
        validate_egress("t", &origins, &[], confirmed).unwrap();
        validate_egress("t", &origins, &origins[1..], SaveOptions::default()).unwrap();
        assert_eq!(private_origins(&origins), ["http://127.0.0.1:11434"]);
    }

    #[test]
    fn the_list_is_bounded_even_when_confirmed() {
        let origins: Vec<String> = (0..=MAX_EGRESS_ORIGINS)
            .map(|i| format!("https://host{i}.example.com"))
            .collect();
        let confirmed = SaveOptions {
            allow_private_egress: true,
        };
        let err = validate_egress("t", &origins, &[], confirmed).unwrap_err();
        assert!(err.to_string().contains("at most 64"), "{err}");
        validate_egress("t", &origins[..MAX_EGRESS_ORIGINS], &[], confirmed).unwrap();
    }
}
