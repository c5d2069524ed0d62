//! Browsers that mishandle `SameSite=None` (Chromium's list of incompatible clients): old
//! Chrome versions drop such a cookie, and Safari on iOS 12 and macOS 10.14 read it as
//! `Strict`. ingress-nginx's `session-cookie-conditional-samesite-none` leaves the attribute
//! out for them, so an affinity cookie keeps working there.

use std::sync::LazyLock;

use regex::Regex;

/// A pattern of Chromium's published detection code.
fn compile(pattern: &str) -> Regex {
    Regex::new(pattern).expect("a valid pattern")
}

static IOS: LazyLock<Regex> =
    LazyLock::new(|| compile(r"\(iP.+; CPU .*OS (\d+)[_\d]*.*\) AppleWebKit/"));
static MACOS: LazyLock<Regex> =
    LazyLock::new(|| compile(r"\(Macintosh;.*Mac OS X (\d+)_(\d+)[_\d]*.*\) AppleWebKit/"));
static SAFARI: LazyLock<Regex> = LazyLock::new(|| compile(r"Version/.* Safari/"));
static MAC_EMBEDDED: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"^Mozilla/[.\d]+ \(Macintosh;.*Mac OS X [_\d]+\) AppleWebKit/[.\d]+ \(KHTML, like Gecko\)$",
    )
});
static CHROMIUM: LazyLock<Regex> = LazyLock::new(|| compile(r"Chrom(e|ium)"));
static CHROMIUM_VERSION: LazyLock<Regex> = LazyLock::new(|| compile(r"Chrom[^ /]+/(\d+)[.\d]* "));
static UC_VERSION: LazyLock<Regex> =
    LazyLock::new(|| compile(r"UCBrowser/(\d+)\.(\d+)\.(\d+)[.\d]* "));

/// Whether a browser with this `User-Agent` must not be sent `SameSite=None`.
pub fn rejects_same_site_none(ua: &str) -> bool {
    webkit_bug(ua) || drops_unknown_same_site(ua)
}

/// Safari (and other WebKit browsers) on iOS 12 and macOS 10.14 treat `None` as `Strict`.
fn webkit_bug(ua: &str) -> bool {
    let number = |c: Option<regex::Match<'_>>| c.and_then(|m| m.as_str().parse::<u32>().ok());
    let ios12 = IOS
        .captures(ua)
        .is_some_and(|c| number(c.get(1)) == Some(12));
    let mojave = MACOS
        .captures(ua)
        .is_some_and(|c| number(c.get(1)) == Some(10) && number(c.get(2)) == Some(14));
    let safari = SAFARI.is_match(ua) && !CHROMIUM.is_match(ua);
    ios12 || (mojave && (safari || MAC_EMBEDDED.is_match(ua)))
}

/// Chrome 51 to 66, and UC Browser before 12.13.2, reject a `SameSite` value they do not know.
fn drops_unknown_same_site(ua: &str) -> bool {
    if ua.contains("UCBrowser/") {
        let Some(c) = UC_VERSION.captures(ua) else {
            return false;
        };
        let v: Vec<u32> = (1..=3)
            .map(|i| c.get(i).and_then(|m| m.as_str().parse().ok()).unwrap_or(0))
            .collect();
        return (v[0], v[1], v[2]) < (12, 13, 2);
    }
    let version = CHROMIUM_VERSION
        .captures(ua)
        .and_then(|c| c.get(1)?.as_str().parse::<u32>().ok());
    CHROMIUM.is_match(ua) && version.is_some_and(|v| (51..67).contains(&v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_incompatible_clients_are_found() {
        for ua in [
            // iOS 12, any browser.
            "Mozilla/5.0 (iPhone; CPU iPhone OS 12_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/12.0 Mobile/15E148 Safari/604.1",
            "Mozilla/5.0 (iPad; CPU OS 12_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/76.0.3809.123 Mobile/15E148 Safari/605.1",
            // Safari and embedded browsers on macOS 10.14.
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/12.1.2 Safari/605.1.15",
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_14_6) AppleWebKit/605.1.15 (KHTML, like Gecko)",
            // Chrome 51 to 66.
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/66.0.3359.181 Safari/537.36",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/51.0.2704.103 Safari/537.36",
            // UC Browser before 12.13.2.
            "Mozilla/5.0 (Linux; U; Android 9; en-US; SM-G960F Build/PPR1.180610.011) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/57.0.2987.108 UCBrowser/12.13.0.1207 Mobile Safari/537.36",
        ] {
            assert!(rejects_same_site_none(ua), "{ua}");
        }
    }

    #[test]
    fn current_browsers_get_same_site_none() {
        for ua in [
            "Mozilla/5.0 (iPhone; CPU iPhone OS 13_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/13.0 Mobile/15E148 Safari/604.1",
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
            // Chrome on macOS 10.14 is not Safari.
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_14_6) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/90.0.4430.93 Safari/537.36",
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/50.0.2661.102 Safari/537.36",
            "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
            "Mozilla/5.0 (Linux; U; Android 10; en-US) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/78.0.3904.108 UCBrowser/13.4.0.1306 Mobile Safari/537.36",
            "curl/8.5.0",
            "",
        ] {
            assert!(!rejects_same_site_none(ua), "{ua}");
        }
    }
}
