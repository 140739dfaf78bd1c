//! A certificate's subject as RFC 2253 writes it (`CN=alice,OU=eng,O=example`:
//! the most specific part first, which is the reverse of the encoded order):
//! the form an SSL principal takes (`User:CN=alice,...`).

use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::AttributeTypeAndValue;

/// The subject of a DER certificate, or `None` if it does not parse.
pub(crate) fn subject(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let rdns: Vec<String> = cert
        .subject()
        .iter_rdn()
        .map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+"))
        .collect();
    Some(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// `TYPE=value`, with the short names of RFC 2253 (and RFC 4514's UID) and
/// the dotted OID with the value's bytes in hex otherwise.
fn attribute(attr: &AttributeTypeAndValue<'_>) -> String {
    let oid = attr.attr_type().to_id_string();
    let short = match oid.as_str() {
        "2.5.4.3" => Some("CN"),
        "2.5.4.6" => Some("C"),
        "2.5.4.7" => Some("L"),
        "2.5.4.8" => Some("ST"),
        "2.5.4.9" => Some("STREET"),
        "2.5.4.10" => Some("O"),
        "2.5.4.11" => Some("OU"),
        "0.9.2342.19200300.100.1.1" => Some("UID"),
        "0.9.2342.19200300.100.1.25" => Some("DC"),
        _ => None,
    };
    match (short, attr.as_str()) {
        (Some(name), Ok(value)) => format!("{name}={}", escape(value)),
        (name, _) => {
            let hex: String = attr.as_slice().iter().map(|b| format!("{b:02x}")).collect();
            format!("{}=#{hex}", name.map_or(oid.clone(), str::to_string))
        }
    }
}

/// RFC 2253's escaping: `,+"\<>;` anywhere, `#` or a space first, a space last.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

    #[test]
    fn most_specific_first_and_escaped() {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CountryName, "NL");
        dn.push(DnType::OrganizationName, "Example, Inc.");
        dn.push(DnType::CommonName, "alice");
        params.distinguished_name = dn;
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            subject(cert.der()).as_deref(),
            Some("CN=alice,O=Example\\, Inc.,C=NL")
        );
        assert_eq!(escape(" #a "), "\\ #a\\ ");
        assert_eq!(subject(b"not a certificate"), None);
    }
}
