//! Files from the Hugging Face hub (or a mirror at `HF_ENDPOINT`): resumable downloads into a
//! part file kept between attempts, checked against the pinned sha256 or the hub's own, with
//! the token sent to the hub's origin only.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::catalogue::InstalledFile;
use super::install::{FetchProgress, Registries};
use super::manifest::FileSpec;
use super::verify::{hex, sha256_file};
use crate::cancel::Cancel;
use crate::error::{Error, Result};

/// Downloads one hub file into `dest`, resuming a `.part` left by an interrupted attempt and
/// checking the result against the manifest's sha256 or, failing that, the hub's own content
/// hash (`X-Linked-Etag`, the sha256 of an LFS file). `HF_TOKEN` goes with the request only
/// when `url` is on the hub's own host, and is dropped on any redirect.
pub(super) fn download_file(
    url: &str,
    spec: &FileSpec,
    dest: &Path,
    registries: &Registries,
    on_progress: &dyn Fn(&FetchProgress),
    cancel: &Cancel,
) -> Result<InstalledFile> {
    let fail = |reason: String| Error::Download {
        url: url.to_string(),
        reason,
    };
    // Parts live beside the install folder so a retry (with a new staging folder) resumes.
    let part = dest
        .parent()
        .unwrap_or(dest)
        .join(format!(".part-{}", url_key(url)));
    let have = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
    let response = request_from(url, have, registries).map_err(|e| fail(e.to_string()))?;
    let status = response.status().as_u16();
    let hub_sha = response_header(&response, "x-linked-etag")
        .or_else(|| response_header(&response, "etag"))
        .filter(|v| v.len() == 64 && v.chars().all(|c| c.is_ascii_hexdigit()));
    let (done, append) = resume_from(status, have).map_err(fail)?;
    let progress = |done: u64, total: Option<u64>| {
        on_progress(&FetchProgress {
            file: spec.path.clone(),
            done,
            total,
        })
    };
    let (done, total) = if status == 416 {
        (have, Some(have))
    } else {
        let length: Option<u64> =
            response_header(&response, "content-length").and_then(|v| v.parse().ok());
        let total = length.map(|l| l + done);
        let body = Body {
            part: &part,
            append,
            total,
            cancel,
        };
        let done = append_body(response, &body, done, &progress, &fail)?;
        (done, total)
    };
    if let Some(total) = total {
        if done < total {
            return Err(fail(format!(
                "connection closed after {done} of {total} bytes; run the same command again to resume"
            )));
        }
    }
    progress(done, total);
    place_checked(&part, dest, spec, hub_sha, &fail)
}

/// A GET of `url` from byte `have` on, with the hub's token when `url` is the hub's.
fn request_from(
    url: &str,
    have: u64,
    registries: &Registries,
) -> std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(20)))
        .timeout_recv_body(Some(Duration::from_secs(60)))
        .http_status_as_error(false)
        // The hub sends LFS files from a CDN on another host: the token stays behind.
        .redirect_auth_headers(ureq::config::RedirectAuthHeaders::Never)
        .build()
        .into();
    let mut request = agent.get(url);
    if let Some(token) = registries.token_for(url) {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    if have > 0 {
        request = request.header("Range", format!("bytes={have}-"));
    }
    request.call()
}

/// A response header without quotes or a weak-validator prefix.
fn response_header(response: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.trim_matches('"')
                .trim_start_matches("W/")
                .trim_matches('"')
                .to_string()
        })
}

/// Where the body starts and whether it extends the part file, from the response status.
fn resume_from(status: u16, have: u64) -> std::result::Result<(u64, bool), String> {
    match status {
        206 => Ok((have, true)),
        200 => Ok((0, false)),
        416 if have > 0 => Ok((have, true)), // the part is already whole
        404 => Err("not found on the server (404)".into()),
        401 | 403 => Err(format!(
            "access denied ({status}); the repository may be gated: accept its licence on the hub and set HF_TOKEN"
        )),
        _ => Err(format!("server answered {status}")),
    }
}

/// Writes the body to the part file, reporting progress; returns the bytes the part holds.
/// Where a download's body goes, and what may stop it.
struct Body<'a> {
    /// The part file, kept between attempts.
    part: &'a Path,
    /// Whether the body continues the part (a resumed download).
    append: bool,
    /// The whole file's size, when the server said.
    total: Option<u64>,
    cancel: &'a Cancel,
}

fn append_body(
    response: ureq::http::Response<ureq::Body>,
    body_to: &Body<'_>,
    mut done: u64,
    progress: &dyn Fn(u64, Option<u64>),
    fail: &dyn Fn(String) -> Error,
) -> Result<u64> {
    let Body {
        part,
        append,
        total,
        cancel,
    } = *body_to;
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(part)
        .map_err(|e| Error::io(part, e))?;
    let mut body = response.into_body().into_reader();
    let mut buf = vec![0u8; 1 << 16];
    let mut last_report = std::time::Instant::now();
    loop {
        if cancel.is_cancelled() {
            out.sync_all().map_err(|e| Error::io(part, e))?;
            return Err(fail(format!(
                "cancelled after {done} bytes; install it again to resume"
            )));
        }
        let n = body.read(&mut buf).map_err(|e| {
            fail(format!(
                "{e} after {done} bytes; run the same command again to resume"
            ))
        })?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(|e| Error::io(part, e))?;
        done += n as u64;
        if last_report.elapsed() >= Duration::from_millis(200) {
            progress(done, total);
            last_report = std::time::Instant::now();
        }
    }
    out.sync_all().map_err(|e| Error::io(part, e))?;
    Ok(done)
}

/// Checks the whole part against the pinned or the hub's sha256 and moves it into place; a
/// mismatch discards it, so the next attempt starts over.
fn place_checked(
    part: &Path,
    dest: &Path,
    spec: &FileSpec,
    hub_sha: Option<String>,
    fail: &dyn Fn(String) -> Error,
) -> Result<InstalledFile> {
    let (sha256, bytes) = sha256_file(part)?;
    let expected = spec.sha256.clone().or(hub_sha);
    if let Some(expected) = expected {
        if !sha256.eq_ignore_ascii_case(&expected) {
            let _ = std::fs::remove_file(part);
            return Err(fail(format!(
                "checksum mismatch (sha256 {sha256}, expected {expected}); the partial file was discarded, run the command again"
            )));
        }
    }
    let to = dest.join(&spec.path);
    std::fs::rename(part, &to).map_err(|e| Error::io(&to, e))?;
    Ok(InstalledFile {
        path: spec.path.clone(),
        bytes,
        sha256,
    })
}

fn url_key(url: &str) -> String {
    let digest = Sha256::digest(url.as_bytes());
    hex(&digest[..8])
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::models::manifest::spec;
    use crate::models::test_http;
    use crate::models::Models;

    /// Each request a loopback server saw: its path and its `Authorization` header.
    type SeenRequests = std::sync::Arc<std::sync::Mutex<Vec<(String, Option<String>)>>>;

    /// A loopback server that records each request's path and `Authorization` header. Paths
    /// starting `/moved` answer a redirect to `redirect_to` plus the rest of the path; others
    /// answer 200 with the path as the body.
    struct Recorder {
        url: String,
        seen: SeenRequests,
    }

    fn recorder(redirect_to: Option<String>) -> Recorder {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some(request) = test_http::read_request(&stream) else {
                    continue;
                };
                let path = request.path.clone();
                let authorization = request.header("authorization").map(String::from);
                log.lock().unwrap().push((path.clone(), authorization));
                let reply = match (path.strip_prefix("/moved"), &redirect_to) {
                    (Some(rest), Some(to)) => format!(
                        "HTTP/1.1 302 Found\r\nLocation: {to}{rest}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    ),
                    _ => format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{path}",
                        path.len()
                    ),
                };
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        Recorder { url, seen }
    }

    fn seen(server: &Recorder) -> Vec<(String, Option<String>)> {
        server.seen.lock().unwrap().clone()
    }

    #[test]
    fn hub_settings_come_from_the_environment_and_the_token_only_suits_the_hub_origin() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let hub = Registries::from_vars(vars(&[]));
        assert_eq!(hub.endpoint, "https://huggingface.co");
        assert!(hub.token.is_none());
        let hub = Registries::from_vars(vars(&[
            ("HF_ENDPOINT", "https://mirror.example"),
            ("HF_TOKEN", "  "),
        ]));
        assert_eq!(hub.endpoint, "https://mirror.example");
        assert!(hub.token.is_none(), "a blank token is no token");
        let hub = Registries::from_vars(vars(&[
            ("QUARRY_HF_ENDPOINT", "https://HuggingFace.co/"),
            ("HF_ENDPOINT", "https://mirror.example"),
            ("HF_TOKEN", "hf_secret\n"),
        ]));
        assert_eq!(hub.endpoint, "https://HuggingFace.co/");
        assert_eq!(hub.token.as_deref(), Some("hf_secret"));
        let on_hub = "https://huggingface.co/Xenova/m/resolve/main/onnx/model.onnx";
        assert_eq!(hub.token_for(on_hub), Some("hf_secret"));
        assert_eq!(
            hub.token_for("https://huggingface.co:443/x"),
            Some("hf_secret")
        );
        for elsewhere in [
            "https://cdn-lfs.huggingface.co/x",
            "https://huggingface.co.evil.example/x",
            "https://evil.example/huggingface.co/x",
            "http://huggingface.co/x",
            "https://huggingface.co:8443/x",
            "https://huggingface.co@evil.example/x",
            "not a url",
        ] {
            assert_eq!(hub.token_for(elsewhere), None, "{elsewhere}");
        }
    }

    #[test]
    fn hub_fetches_send_hf_token_and_other_hosts_never_get_it() {
        let other = recorder(None);
        let hub = recorder(Some(format!("{}/cdn", other.url)));
        let dir = tempfile::tempdir().unwrap();
        let models = Models::at(vec![dir.path().join("models")]);
        std::fs::create_dir_all(dir.path().join("models")).unwrap();
        let access = Registries {
            pip_index: None,
            endpoint: hub.url.clone(),
            token: Some("hf_test_token".into()),
        };

        // A catalogue model from the hub: every file request carries the token.
        let model = models
            .fetch_from("ms-marco-minilm-l6-v2", &access, &|_| {}, &Cancel::new())
            .unwrap();
        assert_eq!(model.origin, "hub:Xenova/ms-marco-MiniLM-L-6-v2@main");
        let requests = seen(&hub);
        assert_eq!(
            requests.len(),
            spec("ms-marco-minilm-l6-v2").unwrap().files.len()
        );
        for (path, auth) in &requests {
            assert!(
                path.starts_with("/Xenova/ms-marco-MiniLM-L-6-v2/resolve/main/"),
                "{path}"
            );
            assert_eq!(auth.as_deref(), Some("Bearer hf_test_token"), "{path}");
        }
        assert_eq!(
            std::fs::read_to_string(model.file("model.onnx")).unwrap(),
            "/Xenova/ms-marco-MiniLM-L-6-v2/resolve/main/onnx/model.onnx"
        );

        // Without a token nothing is sent.
        let no_token = Registries {
            pip_index: None,
            endpoint: hub.url.clone(),
            token: None,
        };
        models
            .fetch_from("ms-marco-minilm-l6-v2", &no_token, &|_| {}, &Cancel::new())
            .unwrap();
        assert!(seen(&hub)[requests.len()..]
            .iter()
            .all(|(_, a)| a.is_none()));

        let spec = FileSpec {
            path: "file.bin".into(),
            from: "file.bin".into(),
            sha256: None,
        };
        let staging = dir.path().join("models/.staging-test");
        std::fs::create_dir_all(&staging).unwrap();

        // A URL on another host (here another port) gets no token…
        let url = format!("{}/direct/file.bin", other.url);
        download_file(&url, &spec, &staging, &access, &|_| {}, &Cancel::new()).unwrap();
        assert_eq!(seen(&other), vec![("/direct/file.bin".to_string(), None)]);

        // …nor does a redirect from the hub to another host, though the hub itself gets it.
        let before = seen(&hub).len();
        let url = format!("{}/moved/file.bin", hub.url);
        download_file(&url, &spec, &staging, &access, &|_| {}, &Cancel::new()).unwrap();
        assert_eq!(
            seen(&hub)[before..],
            [(
                "/moved/file.bin".to_string(),
                Some("Bearer hf_test_token".to_string())
            )]
        );
        assert_eq!(seen(&other)[1..], [("/cdn/file.bin".to_string(), None)]);
        assert_eq!(
            std::fs::read_to_string(staging.join("file.bin")).unwrap(),
            "/cdn/file.bin"
        );
    }
}
