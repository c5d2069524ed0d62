//! htpasswd lines (`user:hash`) for `basic-auth`'s `htpasswd` list: parsed and checked at
//! configuration time, then a presented password is verified against one line's hash.
//!
//! Hash formats: bcrypt (`$2y$`, `$2a$`, `$2b$`: `htpasswd -B`), Apache MD5 (`$apr1$`,
//! htpasswd's default) and its glibc twin MD5-crypt (`$1$`), SHA-1 (`{SHA}`, `htpasswd -s`) and
//! salted SHA-1 (`{SSHA}`), SHA-256-crypt and SHA-512-crypt (`$5$`, `$6$`: `htpasswd -2`, `-5`,
//! or `mkpasswd`). Plain text and legacy DES crypt are refused. Every comparison of a computed
//! hash with the stored one is constant-time.
//!
//! Errors name the line's index and user, never its hash.

use std::fmt;

use base64::Engine as _;
use md5::{Digest as _, Md5};
use subtle::ConstantTimeEq as _;

/// The highest bcrypt cost accepted: `htpasswd -C` allows 4 to 17 (one check at 17 takes
/// seconds; more would let one request hold a CPU for minutes).
pub(super) const MAX_BCRYPT_COST: u32 = 17;

/// The most SHA-crypt rounds accepted (glibc's default is 5,000; 10 million take seconds).
pub(super) const MAX_SHA_CRYPT_ROUNDS: usize = 10_000_000;

/// The alphabet of crypt's base-64 encodings (MD5-crypt, SHA-crypt, DES).
const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// One line: a user and its hash.
pub(super) struct Entry {
    pub(super) user: String,
    pub(super) hash: Hash,
}

/// A parsed hash, ready to verify passwords against.
pub(super) enum Hash {
    /// The whole `$2?$cost$salthash` string (checked by the `bcrypt` crate).
    Bcrypt(String),
    /// `$apr1$salt$hash` (`apr1`) or `$1$salt$hash`: the salt and the 22 encoded characters.
    Md5Crypt {
        apr1: bool,
        salt: Vec<u8>,
        encoded: [u8; 22],
    },
    /// `{SHA}base64(sha1(password))`.
    Sha1([u8; 20]),
    /// `{SSHA}base64(sha1(password + salt) + salt)`.
    SaltedSha1 { digest: [u8; 20], salt: Vec<u8> },
    /// `$5$[rounds=N$]salt$hash` or `$6$…`: the encoded hash (43 or 86 characters).
    ShaCrypt {
        sha512: bool,
        rounds: usize,
        salt: Vec<u8>,
        encoded: Vec<u8>,
    },
}

/// Shows the kind only: a hash never ends up in a log.
impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

impl Hash {
    /// The format's name.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Hash::Bcrypt(_) => "bcrypt",
            Hash::Md5Crypt { apr1: true, .. } => "apr1",
            Hash::Md5Crypt { apr1: false, .. } => "md5-crypt",
            Hash::Sha1(_) => "sha1",
            Hash::SaltedSha1 { .. } => "ssha",
            Hash::ShaCrypt { sha512: false, .. } => "sha256-crypt",
            Hash::ShaCrypt { sha512: true, .. } => "sha512-crypt",
        }
    }

    /// Whether a check costs milliseconds or more (by design): worth running off the event
    /// loop, and caching when it succeeds.
    pub(super) fn is_slow(&self) -> bool {
        matches!(self, Hash::Bcrypt(_) | Hash::ShaCrypt { .. })
    }

    /// Whether `password` is the one this hash was made from.
    pub(super) fn verify(&self, password: &[u8]) -> bool {
        match self {
            // bcrypt uses the first 72 bytes, as htpasswd and every other implementation do.
            Hash::Bcrypt(h) => bcrypt::verify(password, h).unwrap_or(false),
            Hash::Md5Crypt {
                apr1,
                salt,
                encoded,
            } => {
                let magic: &[u8] = if *apr1 { b"$apr1$" } else { b"$1$" };
                md5_crypt(password, salt, magic).ct_eq(encoded).into()
            }
            Hash::Sha1(digest) => sha1(&[password]).ct_eq(digest).into(),
            Hash::SaltedSha1 { digest, salt } => sha1(&[password, salt]).ct_eq(digest).into(),
            Hash::ShaCrypt {
                sha512,
                rounds,
                salt,
                encoded,
            } => {
                let computed = if *sha512 {
                    sha_crypt::Sha512Params::new(*rounds)
                        .and_then(|p| sha_crypt::sha512_crypt_b64(password, salt, &p))
                } else {
                    sha_crypt::Sha256Params::new(*rounds)
                        .and_then(|p| sha_crypt::sha256_crypt_b64(password, salt, &p))
                };
                computed.is_ok_and(|c| c.as_bytes().ct_eq(encoded).into())
            }
        }
    }
}

/// Parses the line at `index` of the list: `None` for a blank line or a `#` comment (as in an
/// htpasswd file). Whatever follows a second `:` is ignored, as Apache and nginx do.
pub(super) fn parse_line(index: usize, line: &str) -> Result<Option<Entry>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let Some((user, rest)) = line.split_once(':') else {
        return Err(format!(
            "htpasswd[{index}]: not a \"user:hash\" line (no ':')"
        ));
    };
    if user.is_empty() {
        return Err(format!("htpasswd[{index}]: the user name is empty"));
    }
    let hash = rest.split(':').next().unwrap_or_default();
    let hash = parse_hash(hash)
        .map_err(|reason| format!("htpasswd[{index}] (user {user:?}): {reason}"))?;
    Ok(Some(Entry {
        user: user.to_string(),
        hash,
    }))
}

/// Recognises a hash; the error says why it is refused, without quoting it.
pub(super) fn parse_hash(h: &str) -> Result<Hash, String> {
    const RECREATE: &str = "re-create it with htpasswd -B";
    if h.starts_with("$2y$") || h.starts_with("$2a$") || h.starts_with("$2b$") {
        let parts: bcrypt::HashParts = h
            .parse()
            .map_err(|_| "not a valid bcrypt hash".to_string())?;
        let cost = parts.get_cost();
        if !(4..=MAX_BCRYPT_COST).contains(&cost) {
            return Err(format!(
                "bcrypt cost {cost} is not between 4 and {MAX_BCRYPT_COST} (htpasswd -C's range)"
            ));
        }
        return Ok(Hash::Bcrypt(h.to_string()));
    }
    for (magic, apr1) in [("$apr1$", true), ("$1$", false)] {
        if let Some(rest) = h.strip_prefix(magic) {
            let name = if apr1 {
                "Apache MD5 ($apr1$)"
            } else {
                "MD5-crypt ($1$)"
            };
            let invalid = || format!("not a valid {name} hash");
            let (salt, encoded) = rest.split_once('$').ok_or_else(invalid)?;
            if salt.len() > 8 || salt.contains('$') || !is_crypt64(encoded, 22) {
                return Err(invalid());
            }
            let mut e = [0; 22];
            e.copy_from_slice(encoded.as_bytes());
            return Ok(Hash::Md5Crypt {
                apr1,
                salt: salt.as_bytes().to_vec(),
                encoded: e,
            });
        }
    }
    if let Some(b64) = h.strip_prefix("{SHA}") {
        let digest = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .ok()
            .and_then(|d| <[u8; 20]>::try_from(d).ok())
            .ok_or("not a valid {SHA} hash (base64 of a SHA-1 digest)")?;
        return Ok(Hash::Sha1(digest));
    }
    if let Some(b64) = h.strip_prefix("{SSHA}") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .ok()
            .filter(|d| d.len() > 20)
            .ok_or("not a valid {SSHA} hash (base64 of a SHA-1 digest and a salt)")?;
        let mut digest = [0; 20];
        digest.copy_from_slice(&decoded[..20]);
        return Ok(Hash::SaltedSha1 {
            digest,
            salt: decoded[20..].to_vec(),
        });
    }
    for (magic, sha512, length) in [("$5$", false, 43), ("$6$", true, 86)] {
        if let Some(rest) = h.strip_prefix(magic) {
            return sha_crypt_hash(rest, sha512, length);
        }
    }
    if h.starts_with("{PLAIN}") {
        return Err(format!(
            "plain-text passwords are not supported; {RECREATE}"
        ));
    }
    if h.len() == 13 && h.bytes().all(|b| ITOA64.contains(&b)) {
        return Err(format!("DES crypt hashes are not supported; {RECREATE}"));
    }
    // Another scheme, named from a fixed list (whatever else a line holds could be a
    // plain-text password, never to be quoted).
    match UNSUPPORTED.iter().find(|scheme| h.starts_with(*scheme)) {
        Some(scheme) => Err(format!(
            "the hash scheme {scheme} is not supported; {RECREATE}"
        )),
        None => Err(format!(
            "plain-text passwords are not supported (or the hash format is unknown); {RECREATE}"
        )),
    }
}

/// Password schemes that are not supported, to name them in errors.
const UNSUPPORTED: &[&str] = &[
    "$2x$",
    "$y$",
    "$gy$",
    "$7$",
    "$argon2id$",
    "$argon2i$",
    "$argon2d$",
    "$3$",
    "$md5",
    "$sha1$",
    "{SSHA256}",
    "{SSHA512}",
    "{SHA256}",
    "{SHA512}",
    "{SMD5}",
    "{MD5}",
    "{CRYPT}",
    "{ARGON2}",
    "{BLF-CRYPT}",
];

/// After `$5$` or `$6$`: `[rounds=N$]salt$hash`. Rounds out of glibc's range are clamped to it,
/// as glibc does; the salt is at most 16 characters (glibc truncates longer ones when hashing,
/// so a hash with a longer salt cannot come from it).
fn sha_crypt_hash(rest: &str, sha512: bool, length: usize) -> Result<Hash, String> {
    let name = if sha512 {
        "SHA-512-crypt ($6$)"
    } else {
        "SHA-256-crypt ($5$)"
    };
    let invalid = || format!("not a valid {name} hash");
    let (rounds, rest) = match rest.strip_prefix("rounds=") {
        Some(r) => {
            let (n, rest) = r.split_once('$').ok_or_else(invalid)?;
            if n.is_empty() || n.len() > 10 || !n.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid());
            }
            let n: usize = n.parse().map_err(|_| invalid())?;
            (n.clamp(sha_crypt::ROUNDS_MIN, sha_crypt::ROUNDS_MAX), rest)
        }
        None => (sha_crypt::ROUNDS_DEFAULT, rest),
    };
    if rounds > MAX_SHA_CRYPT_ROUNDS {
        return Err(format!(
            "{name} with {rounds} rounds is more than the {MAX_SHA_CRYPT_ROUNDS} accepted"
        ));
    }
    let (salt, encoded) = rest.split_once('$').ok_or_else(invalid)?;
    if salt.len() > 16 || !is_crypt64(encoded, length) {
        return Err(invalid());
    }
    Ok(Hash::ShaCrypt {
        sha512,
        rounds,
        salt: salt.as_bytes().to_vec(),
        encoded: encoded.as_bytes().to_vec(),
    })
}

/// Whether `s` is `length` characters of crypt's base-64 alphabet.
fn is_crypt64(s: &str, length: usize) -> bool {
    s.len() == length && s.bytes().all(|b| ITOA64.contains(&b))
}

fn sha1(parts: &[&[u8]]) -> [u8; 20] {
    let mut h = sha1_smol::Sha1::new();
    for p in parts {
        h.update(p);
    }
    h.digest().bytes()
}

/// Poul-Henning Kamp's MD5-crypt, as Apache (`$apr1$`) and glibc (`$1$`) implement it; `magic`
/// is the prefix, the only difference between the two. Returns the 22 encoded characters.
fn md5_crypt(password: &[u8], salt: &[u8], magic: &[u8]) -> [u8; 22] {
    let salt = &salt[..salt.len().min(8)];
    let mut alternate = Md5::new();
    alternate.update(password);
    alternate.update(salt);
    alternate.update(password);
    let alternate = alternate.finalize();

    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(magic);
    ctx.update(salt);
    let mut left = password.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alternate[..n]);
        left -= n;
    }
    // The original's quirk: for each bit of the length, a zero byte or the password's first.
    let mut bits = password.len();
    while bits != 0 {
        if bits & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        bits >>= 1;
    }
    let mut last = ctx.finalize();

    // 1000 rounds, to slow brute force down (in 1994).
    for i in 0..1000 {
        let mut round = Md5::new();
        if i & 1 == 1 {
            round.update(password);
        } else {
            round.update(last);
        }
        if i % 3 != 0 {
            round.update(salt);
        }
        if i % 7 != 0 {
            round.update(password);
        }
        if i & 1 == 1 {
            round.update(last);
        } else {
            round.update(password);
        }
        last = round.finalize();
    }

    let f = last;
    let mut out = [0u8; 22];
    let mut at = 0;
    let mut put = |v: u32, n: usize| {
        let mut v = v;
        for _ in 0..n {
            out[at] = ITOA64[(v & 0x3f) as usize];
            v >>= 6;
            at += 1;
        }
    };
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        put(
            (u32::from(f[a]) << 16) | (u32::from(f[b]) << 8) | u32::from(f[c]),
            4,
        );
    }
    put(u32::from(f[11]), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Made with Apache's htpasswd 2.4 (`htpasswd -nb[B|m|s|2|5]`), glibc's crypt(3) and Python.
    const VECTORS: &[(&str, &str, &str)] = &[
        // htpasswd -nbB -C 5 alice 'open sesame'
        (
            "alice:$2y$05$ro5zclb0z5ualKoQy3TyMeQPjBASQj34ZvGqSHyVHBwy9K9.78i/q",
            "open sesame",
            "bcrypt",
        ),
        // The same hash under the other bcrypt prefixes (identical for these passwords).
        (
            "alice:$2a$05$ro5zclb0z5ualKoQy3TyMeQPjBASQj34ZvGqSHyVHBwy9K9.78i/q",
            "open sesame",
            "bcrypt",
        ),
        (
            "alice:$2b$05$ro5zclb0z5ualKoQy3TyMeQPjBASQj34ZvGqSHyVHBwy9K9.78i/q",
            "open sesame",
            "bcrypt",
        ),
        // htpasswd -nbB -C 4 bob hunter2
        (
            "bob:$2y$04$8nYfJRVZvY.ZWOEe29sKWu6YLXySuy5griTzKmK89o4ZBwr5f2js.",
            "hunter2",
            "bcrypt",
        ),
        // htpasswd -nbm carol 'open sesame'
        (
            "carol:$apr1$a0hE7Xgg$AXK2PJNzqEI/TstAXkSe91",
            "open sesame",
            "apr1",
        ),
        // htpasswd -nbm dave '' (an empty password)
        ("dave:$apr1$A.40sm74$9ThQv8eN6sodb0.0nMOMm.", "", "apr1"),
        // htpasswd -nbm long '<48 bytes>' (more than one 16-byte block of the alternate sum)
        (
            "long:$apr1$C5rTScJN$OeLocJehnKsCIni18DqrT.",
            "a password longer than sixteen bytes, much longer",
            "apr1",
        ),
        // crypt("open sesame", "$1$abcdefgh")
        (
            "md5:$1$abcdefgh$9qMkHazuSy1Q8myEum7yb/",
            "open sesame",
            "md5-crypt",
        ),
        // htpasswd -nbs erin 'open sesame'
        ("erin:{SHA}W8r/fyL/UzygmbNAjq2HbA67qac=", "open sesame", "sha1"),
        // base64(sha1("open sesame" + "\x01\x02salty") + "\x01\x02salty")
        (
            "ssha:{SSHA}pE02SZ7BtUoLp/y5DaAxpBq72r8BAnNhbHR5",
            "open sesame",
            "ssha",
        ),
        // htpasswd -nb -2 h2 'open sesame'
        (
            "h2:$5$JWGkToepXcYTTlWA$N5225YYyAsaRIBHjw7UWzbsFs3wslG5AHTf1kDR.OR5",
            "open sesame",
            "sha256-crypt",
        ),
        // htpasswd -nb -5 -r 1000 h5 'open sesame'
        (
            "h5:$6$rounds=1000$GYFJyouaEws3Xukp$tL5Auuf4SSOtIZ0XLSaDVcHnuPrnP5.JCF5b2aoeValUFPNSP6iE/BMQsmblFQYfpYFAogkgzH/T28CxghRwo0",
            "open sesame",
            "sha512-crypt",
        ),
        // crypt("open sesame", "$6$saltstring")
        (
            "s6:$6$saltstring$b4SOQO.YI.BXjgbKQa.97c9EQud0NW8Txr5rCRGsAucjEsL95TW5MDF/7KcC3bcG5NoxZbmB6Lh82fxg8soAZ0",
            "open sesame",
            "sha512-crypt",
        ),
        // crypt("open sesame", "$5$rounds=10000$longersaltthan16chars"): glibc cut the salt.
        (
            "s5:$5$rounds=10000$longersaltthan16$ujN4FbhgtpuJWZWfLDBNUdhoFVJE2yWCQrql.1VBEFB",
            "open sesame",
            "sha256-crypt",
        ),
    ];

    #[test]
    fn known_vectors_verify_and_near_misses_do_not() {
        for (line, password, kind) in VECTORS {
            let e = parse_line(0, line).unwrap().unwrap();
            assert_eq!(e.hash.kind(), *kind, "{line}");
            assert_eq!(Some(e.user.as_str()), line.split(':').next());
            assert!(e.hash.verify(password.as_bytes()), "{line}");
            for wrong in [
                format!("{password}x"),
                password.to_uppercase(),
                String::from("x"),
            ] {
                if wrong != *password {
                    assert!(!e.hash.verify(wrong.as_bytes()), "{line} with {wrong:?}");
                }
            }
            if !password.is_empty() {
                assert!(!e.hash.verify(b""), "{line} with no password");
                assert!(!e.hash.verify(&password.as_bytes()[1..]), "{line}");
            }
        }
    }

    #[test]
    fn bcrypt_uses_the_first_72_bytes() {
        // htpasswd -nbB -C 4 long72 "$(printf 'x%.0s' $(seq 1 80))"
        let h = parse_hash("$2y$04$mlckgVz3DK16/WID6ZyjuuBLwIQCzBOv1SIInjgM9soCuSJaVJize").unwrap();
        assert!(h.verify(&[b'x'; 80]));
        assert!(h.verify(&[b'x'; 72]), "as every bcrypt does");
        assert!(!h.verify(&[b'x'; 71]));
    }

    #[test]
    fn md5_crypt_matches_its_reference_vectors() {
        assert_eq!(
            &md5_crypt(b"open sesame", b"a0hE7Xgg", b"$apr1$"),
            b"AXK2PJNzqEI/TstAXkSe91"
        );
        // Only the first 8 salt characters count.
        assert_eq!(
            md5_crypt(b"open sesame", b"abcdefghXYZ", b"$1$"),
            md5_crypt(b"open sesame", b"abcdefgh", b"$1$")
        );
    }

    #[test]
    fn lines_blank_comments_and_extra_fields() {
        assert!(parse_line(0, "").unwrap().is_none());
        assert!(parse_line(0, "  \r").unwrap().is_none());
        assert!(parse_line(0, "# admins").unwrap().is_none());
        let e = parse_line(0, " erin:{SHA}W8r/fyL/UzygmbNAjq2HbA67qac=:Erin, ops \r\n")
            .unwrap()
            .unwrap();
        assert_eq!(e.user, "erin");
        assert!(e.hash.verify(b"open sesame"));
        // The user may hold anything but ':'.
        let e = parse_line(0, "ünï côde@x:{SHA}W8r/fyL/UzygmbNAjq2HbA67qac=")
            .unwrap()
            .unwrap();
        assert_eq!(e.user, "ünï côde@x");
    }

    #[test]
    fn refusals_name_the_entry_and_user_never_the_hash() {
        for (line, expected) in [
            (
                "frank:.KEFZS1jXDhk.",
                r#"htpasswd[3] (user "frank"): DES crypt hashes are not supported; re-create it with htpasswd -B"#,
            ),
            (
                "gina:hunter2",
                r#"htpasswd[3] (user "gina"): plain-text passwords are not supported (or the hash format is unknown); re-create it with htpasswd -B"#,
            ),
            (
                "gina:{PLAIN}hunter2",
                r#"htpasswd[3] (user "gina"): plain-text passwords are not supported; re-create it with htpasswd -B"#,
            ),
            (
                "gina:",
                r#"htpasswd[3] (user "gina"): plain-text passwords are not supported (or the hash format is unknown); re-create it with htpasswd -B"#,
            ),
            (
                "y:$y$j9T$abcdefgh$ABCDEFGH",
                r#"htpasswd[3] (user "y"): the hash scheme $y$ is not supported; re-create it with htpasswd -B"#,
            ),
            (
                "x:$2x$05$ro5zclb0z5ualKoQy3TyMeQPjBASQj34ZvGqSHyVHBwy9K9.78i/q",
                r#"htpasswd[3] (user "x"): the hash scheme $2x$ is not supported; re-create it with htpasswd -B"#,
            ),
            (
                "s:{SSHA512}abcd",
                r#"htpasswd[3] (user "s"): the hash scheme {SSHA512} is not supported; re-create it with htpasswd -B"#,
            ),
            (
                "p:$ecret$pass",
                r#"htpasswd[3] (user "p"): plain-text passwords are not supported (or the hash format is unknown); re-create it with htpasswd -B"#,
            ),
            (
                "p:{secret}pass",
                r#"htpasswd[3] (user "p"): plain-text passwords are not supported (or the hash format is unknown); re-create it with htpasswd -B"#,
            ),
            ("no-colon", r#"htpasswd[3]: not a "user:hash" line (no ':')"#),
            (":{SHA}W8r/fyL/UzygmbNAjq2HbA67qac=", "htpasswd[3]: the user name is empty"),
            (
                "b:$2y$05$ro5zclb0z5ualKoQy3TyMeQPjBASQj34ZvGqSHyVHBwy9K9.78i/",
                r#"htpasswd[3] (user "b"): not a valid bcrypt hash"#,
            ),
            (
                "b:$2y$18$ro5zclb0z5ualKoQy3TyMeQPjBASQj34ZvGqSHyVHBwy9K9.78i/q",
                r#"htpasswd[3] (user "b"): bcrypt cost 18 is not between 4 and 17 (htpasswd -C's range)"#,
            ),
            (
                "b:$2y$03$ro5zclb0z5ualKoQy3TyMeQPjBASQj34ZvGqSHyVHBwy9K9.78i/q",
                r#"htpasswd[3] (user "b"): bcrypt cost 3 is not between 4 and 17 (htpasswd -C's range)"#,
            ),
            (
                "c:$apr1$a0hE7Xgg$AXK2PJNzqEI/TstAXkSe9",
                r#"htpasswd[3] (user "c"): not a valid Apache MD5 ($apr1$) hash"#,
            ),
            (
                "c:$apr1$a0hE7Xgg9$AXK2PJNzqEI/TstAXkSe91",
                r#"htpasswd[3] (user "c"): not a valid Apache MD5 ($apr1$) hash"#,
            ),
            (
                "c:$1$nosalt",
                r#"htpasswd[3] (user "c"): not a valid MD5-crypt ($1$) hash"#,
            ),
            (
                "e:{SHA}W8r/fyL/UzygmbNAjq2HbA67qa==",
                r#"htpasswd[3] (user "e"): not a valid {SHA} hash (base64 of a SHA-1 digest)"#,
            ),
            (
                "e:{SSHA}W8r/fyL/UzygmbNAjq2HbA67qac=",
                r#"htpasswd[3] (user "e"): not a valid {SSHA} hash (base64 of a SHA-1 digest and a salt)"#,
            ),
            (
                "h:$5$JWGkToepXcYTTlWA$N5225YYyAsaRIBHjw7UWzbsFs3wslG5AHTf1kDR.OR",
                r#"htpasswd[3] (user "h"): not a valid SHA-256-crypt ($5$) hash"#,
            ),
            (
                "h:$6$rounds=x$GYFJyouaEws3Xukp$tL5Auuf4SSOtIZ0XLSaDVcHnuPrnP5.JCF5b2aoeValUFPNSP6iE/BMQsmblFQYfpYFAogkgzH/T28CxghRwo0",
                r#"htpasswd[3] (user "h"): not a valid SHA-512-crypt ($6$) hash"#,
            ),
            (
                "h:$6$rounds=20000000$GYFJyouaEws3Xukp$tL5Auuf4SSOtIZ0XLSaDVcHnuPrnP5.JCF5b2aoeValUFPNSP6iE/BMQsmblFQYfpYFAogkgzH/T28CxghRwo0",
                r#"htpasswd[3] (user "h"): SHA-512-crypt ($6$) with 20000000 rounds is more than the 10000000 accepted"#,
            ),
        ] {
            let e = parse_line(3, line).err().unwrap_or_else(|| panic!("{line} accepted"));
            assert_eq!(e, expected, "{line}");
            let hash = line.split_once(':').map_or("", |(_, h)| h);
            if hash.len() > 1 {
                assert!(!e.contains(hash), "{e} quotes the hash");
            }
        }
    }

    #[test]
    fn sha_crypt_rounds_below_the_minimum_are_clamped_as_glibc_does() {
        let Ok(Hash::ShaCrypt { rounds, .. }) =
            parse_hash("$5$rounds=10$saltstring$sOFRiuqOzKEQCZAIFmMrCbPuMEMUPOi/BmBpBwWMgW3")
        else {
            panic!("refused")
        };
        assert_eq!(rounds, 1000);
    }

    #[test]
    fn debug_shows_only_the_kind() {
        let h = parse_hash("{SHA}W8r/fyL/UzygmbNAjq2HbA67qac=").unwrap();
        assert_eq!(format!("{h:?}"), "sha1");
    }
}
