//! Files from pinned PyPI wheels: `pip download` fetches the wheel (from the index pip is
//! configured with, or the one given), its sha256 is checked against the pin, and the listed
//! files are taken out of it, each checked again.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::catalogue::InstalledFile;
use super::install::Registries;
use super::manifest::PackageSource;
use super::verify::{sha256_file, verified};
use crate::error::{Error, Result};

/// `pip download`s one pinned wheel and installs the listed files out of it.
pub(super) fn install_from_wheel(
    source: &PackageSource,
    dest: &Path,
    registries: &Registries,
) -> Result<Vec<InstalledFile>> {
    let download = tempfile_dir()?;
    let requirement = format!("{}=={}", source.pypi, source.version);
    let mut args: Vec<String> = vec![
        "-m".into(),
        "pip".into(),
        "download".into(),
        "--no-deps".into(),
        "--only-binary=:all:".into(),
        "--disable-pip-version-check".into(),
        "--quiet".into(),
        "--dest".into(),
        download.display().to_string(),
    ];
    if let Some(platform) = &source.pip_platform {
        args.extend([
            "--platform".into(),
            platform.clone(),
            "--implementation".into(),
            "cp".into(),
        ]);
    }
    if let Some(version) = &source.pip_python_version {
        args.extend(["--python-version".into(), version.clone()]);
    }
    if let Some(index) = &registries.pip_index {
        // Only this index: pip's configuration (extra indexes, find-links) is left out.
        args.extend(["--isolated".into(), "--index-url".into(), index.clone()]);
    }
    args.push(requirement.clone());
    let python = crate::environment::python().unwrap_or_else(|| "python3".into());
    let output = Command::new(&python)
        .args(&args)
        .output()
        .map_err(|e| Error::Download {
            url: format!("pypi:{requirement}"),
            reason: format!(
                "cannot run `{} -m pip` ({e}); install python3 and pip",
                python.display()
            ),
        })?;
    if !output.status.success() {
        let _ = std::fs::remove_dir_all(&download);
        return Err(Error::Download {
            url: format!("pypi:{requirement}"),
            reason: format!(
                "pip download failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        });
    }
    let wheel = download.join(&source.wheel);
    let result = extract_wheel(&wheel, source, dest);
    let _ = std::fs::remove_dir_all(&download);
    result
}

fn extract_wheel(wheel: &Path, source: &PackageSource, dest: &Path) -> Result<Vec<InstalledFile>> {
    let (sha, _) = sha256_file(wheel).map_err(|_| Error::Download {
        url: format!("pypi:{}=={}", source.pypi, source.version),
        reason: format!("pip did not produce {}", source.wheel),
    })?;
    if sha != source.wheel_sha256 {
        return Err(Error::Download {
            url: format!("pypi:{}=={}", source.pypi, source.version),
            reason: format!(
                "wheel sha256 {sha} does not match the pinned {}",
                source.wheel_sha256
            ),
        });
    }
    let file = std::fs::File::open(wheel).map_err(|e| Error::io(wheel, e))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| Error::InvalidModel {
        path: wheel.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut installed = Vec::new();
    for spec in &source.files {
        let mut entry = archive
            .by_name(&spec.from)
            .map_err(|e| Error::InvalidModel {
                path: wheel.to_path_buf(),
                reason: format!("{}: {e}", spec.from),
            })?;
        let to = dest.join(&spec.path);
        let mut out = std::fs::File::create(&to).map_err(|e| Error::io(&to, e))?;
        std::io::copy(&mut entry, &mut out).map_err(|e| Error::io(&to, e))?;
        drop(out);
        installed.push(verified(&to, spec)?);
    }
    Ok(installed)
}

fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "quarry-pip-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use sha2::{Digest, Sha256};

    use super::*;
    use crate::cancel::Cancel;
    use crate::models::test_http;
    use crate::models::verify::hex;
    use crate::models::{ModelSpec, Models};

    /// A wheel as a package index serves it: the files, and the metadata pip reads.
    fn wheel(name: &str, version: &str, files: &[(&str, &[u8])]) -> Vec<u8> {
        use zip::write::SimpleFileOptions;
        let mut out = std::io::Cursor::new(Vec::new());
        let mut zip = zip::ZipWriter::new(&mut out);
        let dist = format!("{}-{version}.dist-info", name.replace('-', "_"));
        let metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n");
        let wheel = "Wheel-Version: 1.0\nGenerator: quarry-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n";
        let mut all: Vec<(String, Vec<u8>)> = files
            .iter()
            .map(|(path, bytes)| (path.to_string(), bytes.to_vec()))
            .collect();
        all.push((format!("{dist}/METADATA"), metadata.into_bytes()));
        all.push((format!("{dist}/WHEEL"), wheel.as_bytes().to_vec()));
        let record: String = all.iter().map(|(p, _)| format!("{p},,\n")).collect();
        all.push((
            format!("{dist}/RECORD"),
            (record + &format!("{dist}/RECORD,,\n")).into_bytes(),
        ));
        for (path, bytes) in all {
            zip.start_file(path, SimpleFileOptions::default()).unwrap();
            zip.write_all(&bytes).unwrap();
        }
        zip.finish().unwrap();
        out.into_inner()
    }

    /// A loopback PEP 503 index of `wheels` (file name → bytes) for `project`s.
    fn package_index(wheels: Vec<(String, String, Vec<u8>)>) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/simple", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some(request) = test_http::read_request(&stream) else {
                    continue;
                };
                let path = request.path.trim_end_matches('/').to_string();
                let page = wheels.iter().find_map(|(project, file, bytes)| {
                    if path == format!("/simple/{project}") {
                        let link = format!(
                            "<!DOCTYPE html><html><body><a href=\"/files/{file}#sha256={}\">{file}</a></body></html>",
                            hex(&Sha256::digest(bytes))
                        );
                        Some(("text/html", link.into_bytes()))
                    } else if path == format!("/files/{file}") {
                        Some(("application/octet-stream", bytes.clone()))
                    } else {
                        None
                    }
                });
                let (status, kind, body) = match page {
                    Some((kind, body)) => ("200 OK", kind, body),
                    None => ("404 Not Found", "text/plain", b"not here".to_vec()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        url
    }

    #[test]
    fn a_model_in_parts_installs_from_a_package_index_joined_and_checked() {
        let mut whole = crate::models::gguf::tests::header(&[("general.architecture", "qwen2")]);
        whole.extend((0..6000u32).map(|i| (i % 251) as u8));
        let pieces: Vec<&[u8]> = whole.chunks(whole.len().div_ceil(3)).collect();
        let wheels: Vec<(String, String, Vec<u8>)> = pieces
            .iter()
            .enumerate()
            .map(|(i, piece)| {
                let project = format!("tiny-parts-part{}", i + 1);
                let file = format!("tiny_parts_part{}-0.9.0-py3-none-any.whl", i + 1);
                let inside = format!("tiny_parts/part{}.bin", i + 1);
                (
                    project.clone(),
                    file,
                    wheel(&project, "0.9.0", &[(&inside, piece)]),
                )
            })
            .collect();
        let catalogue_entry = |pinned_wheels: &[(String, String, Vec<u8>)]| -> ModelSpec {
            let sources: Vec<serde_json::Value> = pinned_wheels
                .iter()
                .zip(&pieces)
                .enumerate()
                .map(|(i, ((project, file, bytes), piece))| {
                    serde_json::json!({
                        "pypi": project, "version": "0.9.0", "wheel": file,
                        "wheel_sha256": hex(&Sha256::digest(bytes)),
                        "files": [{"path": format!("part{}.bin", i + 1),
                                   "from": format!("tiny_parts/part{}.bin", i + 1),
                                   "sha256": hex(&Sha256::digest(piece))}]
                    })
                })
                .collect();
            serde_json::from_value(serde_json::json!({
                "id": "tiny-parts", "kind": "llm", "description": "a test model in three parts",
                "max_tokens": 512, "license": "Apache-2.0", "sources": sources,
                "provenance": "three test packages",
                "assemble": {"path": "model.gguf", "parts": ["part1.bin", "part2.bin", "part3.bin"],
                             "bytes": whole.len(), "sha256": hex(&Sha256::digest(&whole)),
                             "gguf": {"general.architecture": "qwen2"}}
            }))
            .unwrap()
        };
        let registries = Registries {
            pip_index: Some(package_index(wheels.clone())),
            endpoint: "http://127.0.0.1:9".into(),
            token: None,
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("models")).unwrap();
        let models = Models::at(vec![dir.path().join("models")]);

        let model = models
            .install(
                &catalogue_entry(&wheels),
                &registries,
                &|_| {},
                &Cancel::new(),
            )
            .unwrap();
        assert_eq!(std::fs::read(model.file("model.gguf")).unwrap(), whole);
        assert_eq!(
            model.origin,
            "pypi:tiny-parts-part1==0.9.0 + pypi:tiny-parts-part2==0.9.0 + pypi:tiny-parts-part3==0.9.0"
        );
        let left: Vec<String> = std::fs::read_dir(&model.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("part"))
            .collect();
        assert!(left.is_empty(), "the parts are joined and gone: {left:?}");

        // A part that is not the pinned wheel is refused by name, and the install already
        // there stays as it was.
        let mut tampered = wheels.clone();
        tampered[1].2 = wheel(
            &tampered[1].0,
            "0.9.0",
            &[("tiny_parts/part2.bin", b"other")],
        );
        let registries = Registries {
            pip_index: Some(package_index(tampered)),
            ..registries
        };
        let err = models
            .install(
                &catalogue_entry(&wheels),
                &registries,
                &|_| {},
                &Cancel::new(),
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tiny-parts-part2==0.9.0") && err.contains("does not match the pinned"),
            "{err}"
        );
        assert_eq!(std::fs::read(model.file("model.gguf")).unwrap(), whole);
    }
}
