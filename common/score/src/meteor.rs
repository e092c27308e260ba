//! METEOR 1.5 (Denkowski & Lavie 2014) exactly as pycocoevalcap reports it, by running the
//! same jar the same way.
//!
//! METEOR aligns candidate and references through exact words, stems, WordNet synonyms and a
//! paraphrase table, and scores `(1 − Pen) · F_mean` with
//! `F_mean = P·R / (α·P + (1 − α)·R)` and the fragmentation penalty
//! `Pen = γ · (chunks / matches)^β` (English parameters of the 1.5 release). That needs the
//! jar's resources (the 60 MB paraphrase table among them), so instead of a port this module
//! speaks the jar's line protocol, as pycocoevalcap's `meteor/meteor.py` does:
//!
//! ```text
//! java -jar -Xmx2G meteor-1.5.jar - - -stdio -l en -norm      (working directory: the jar's)
//! > SCORE ||| ref_1 ||| … ||| ref_m ||| hyp      one per image
//! < <sufficient statistics of that image>
//! > EVAL ||| stats_1 ||| … ||| stats_n           all images at once
//! < score_1 … score_n                            one line each
//! < corpus score
//! ```
//!
//! The corpus score is the jar's aggregate over the summed statistics of every image, not the
//! mean of the per-image scores (pycocoevalcap returns that aggregate, and so do we).
//! pycocoevalcap removes `|||` from the hypothesis and replaces double spaces with single
//! ones; here every text is whitespace-normalised and has `|||` removed (references too, and
//! newlines, which would break the protocol). On tokenised text, which is what `caprl` scores,
//! the lines sent are identical.
//!
//! The jar is found through [`JAR_ENV`], else in the `pycocoevalcap` Python package
//! (`pip install pycocoevalcap` ships `meteor/meteor-1.5.jar` and its `data/paraphrase-en.gz`);
//! Java comes from `PATH`.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::thread::JoinHandle;

/// Environment variable naming the METEOR jar, overriding the lookup in pycocoevalcap.
pub const JAR_ENV: &str = "CAPRL_METEOR_JAR";

/// File name of the jar inside pycocoevalcap's `meteor` directory.
pub const JAR_NAME: &str = "meteor-1.5.jar";

const INSTALL_JAVA: &str = "apt-get install -y default-jre-headless";
const INSTALL_JAR: &str = "pip install pycocoevalcap";
/// How much of the jar's stderr an error quotes (its end).
const STDERR_TAIL: usize = 2000;

/// What stopped a METEOR computation.
#[derive(Debug, thiserror::Error)]
pub enum MeteorError {
    /// `java` could not be started.
    #[error("METEOR runs a Java program, and `java` could not be started ({source}); install Java with `{INSTALL_JAVA}`")]
    NoJava {
        /// Why the spawn failed.
        source: std::io::Error,
    },
    /// The jar path (from [`JAR_ENV`] or pycocoevalcap) is not a file.
    #[error("the METEOR jar {} (from {from}) does not exist; install it with `{INSTALL_JAR}` (it ships {JAR_NAME}) or point {JAR_ENV} at a {JAR_NAME}", path.display())]
    NoJar {
        /// The path looked at.
        path: PathBuf,
        /// Where the path came from.
        from: &'static str,
    },
    /// [`JAR_ENV`] is unset and Python could not locate pycocoevalcap.
    #[error("cannot find the METEOR jar: {JAR_ENV} is not set and python3 cannot locate the pycocoevalcap package ({detail}); install it with `{INSTALL_JAR}` (and Java with `{INSTALL_JAVA}`), or set {JAR_ENV} to a {JAR_NAME}")]
    NotInstalled {
        /// What python3 said, or why it could not run.
        detail: String,
    },
    /// Reading from or writing to the jar failed.
    #[error("talking to the METEOR jar {}: {source}", jar.display())]
    Io {
        /// The jar.
        jar: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The jar exited or answered something that is not what the protocol expects.
    #[error("the METEOR jar {} {what}; its stderr ends with: {stderr}", jar.display())]
    Protocol {
        /// The jar.
        jar: PathBuf,
        /// What went wrong (`stopped before …` or `answered … where … was expected`).
        what: String,
        /// The end of the jar's stderr.
        stderr: String,
    },
}

/// Where the METEOR jar is: [`JAR_ENV`] when set, else `meteor/meteor-1.5.jar` of the
/// pycocoevalcap package python3 imports. Errors say how to install what is missing.
pub fn locate_jar() -> Result<PathBuf, MeteorError> {
    if let Some(path) = std::env::var_os(JAR_ENV).filter(|p| !p.is_empty()) {
        return existing(PathBuf::from(path), JAR_ENV);
    }
    let script = "import os, pycocoevalcap.meteor.meteor as m; print(os.path.dirname(os.path.abspath(m.__file__)))";
    let out = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| MeteorError::NotInstalled {
            detail: format!("python3 could not be started: {e}"),
        })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr
            .lines()
            .last()
            .unwrap_or("no output")
            .trim()
            .to_string();
        return Err(MeteorError::NotInstalled { detail: last });
    }
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    existing(Path::new(&dir).join(JAR_NAME), "the pycocoevalcap package")
}

fn existing(path: PathBuf, from: &'static str) -> Result<PathBuf, MeteorError> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(MeteorError::NoJar { path, from })
    }
}

/// One line of the protocol's text: whitespace-normalised, without `|||` (see module docs).
fn protocol_text(text: &str) -> String {
    text.replace("|||", "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// A running METEOR jar.
pub struct Meteor {
    jar: PathBuf,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    stderr: Option<JoinHandle<String>>,
}

impl Meteor {
    /// Starts `java -jar -Xmx2G JAR - - -stdio -l en -norm` in the jar's directory, as
    /// pycocoevalcap does. The jar loads its paraphrase table on the first request (a few
    /// seconds).
    pub fn start(jar: &Path) -> Result<Self, MeteorError> {
        let jar = existing(jar.to_path_buf(), "the caller")?;
        let dir = match jar.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = jar.file_name().map(PathBuf::from).unwrap_or_default();
        let mut child = Command::new("java")
            .arg("-jar")
            .arg("-Xmx2G")
            .arg(&name)
            .args(["-", "-", "-stdio", "-l", "en", "-norm"])
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| MeteorError::NoJava { source })?;
        let (Some(stdin), Some(stdout), Some(mut err)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            unreachable!("all three pipes were requested");
        };
        // Drained on its own thread so a chatty jar never blocks on a full pipe.
        let stderr = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = err.read_to_end(&mut buf);
            let text = String::from_utf8_lossy(&buf).into_owned();
            let cut = text.len().saturating_sub(STDERR_TAIL);
            let cut = (cut..text.len())
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(text.len());
            text[cut..].trim().to_string()
        });
        Ok(Self {
            jar,
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            stderr: Some(stderr),
        })
    }

    /// METEOR of `cands[i]` against `refs[i]`: the corpus score (the jar's aggregate) and the
    /// per-image scores, as pycocoevalcap's `Meteor().compute_score(gts, res)`.
    ///
    /// # Panics
    /// If `refs` and `cands` differ in length.
    pub fn compute_score<R, S, C>(
        &mut self,
        refs: &[R],
        cands: &[C],
    ) -> Result<(f64, Vec<f64>), MeteorError>
    where
        R: AsRef<[S]>,
        S: AsRef<str>,
        C: AsRef<str>,
    {
        assert_eq!(
            refs.len(),
            cands.len(),
            "meteor: one reference set per candidate"
        );
        let mut eval = String::from("EVAL");
        for (r, c) in refs.iter().zip(cands) {
            let refs: Vec<String> = r
                .as_ref()
                .iter()
                .map(|s| protocol_text(s.as_ref()))
                .collect();
            let line = format!(
                "SCORE ||| {} ||| {}",
                refs.join(" ||| "),
                protocol_text(c.as_ref())
            );
            self.send(&line)?;
            let stats = self.receive("a statistics line")?;
            eval.push_str(" ||| ");
            eval.push_str(stats.trim());
        }
        self.send(&eval)?;
        let mut scores = Vec::with_capacity(cands.len());
        for _ in 0..cands.len() {
            scores.push(self.receive_score("a per-image score")?);
        }
        let corpus = self.receive_score("the corpus score")?;
        Ok((corpus, scores))
    }

    fn send(&mut self, line: &str) -> Result<(), MeteorError> {
        let stdin = self.stdin.as_mut().expect("stdin is open until drop");
        let sent = stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.write_all(b"\n"))
            .and_then(|()| stdin.flush());
        match sent {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                Err(self.protocol("stopped before reading its input".into()))
            }
            Err(source) => Err(MeteorError::Io {
                jar: self.jar.clone(),
                source,
            }),
        }
    }

    fn receive(&mut self, expected: &str) -> Result<String, MeteorError> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) => Err(self.protocol(format!("stopped before sending {expected}"))),
            Ok(_) => Ok(line),
            Err(source) => Err(MeteorError::Io {
                jar: self.jar.clone(),
                source,
            }),
        }
    }

    fn receive_score(&mut self, expected: &str) -> Result<f64, MeteorError> {
        let line = self.receive(expected)?;
        line.trim().parse::<f64>().map_err(|_| {
            self.protocol(format!(
                "answered {:?} where {expected} (a number) was expected",
                line.trim()
            ))
        })
    }

    /// A protocol error quoting the end of the jar's stderr; the jar is stopped first so
    /// its stderr is complete.
    fn protocol(&mut self, what: String) -> MeteorError {
        self.stop();
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "(nothing)".into());
        MeteorError::Protocol {
            jar: self.jar.clone(),
            what,
            stderr,
        }
    }

    fn stop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Meteor {
    fn drop(&mut self) {
        self.stop();
        if let Some(h) = self.stderr.take() {
            let _ = h.join();
        }
    }
}

/// Starts the jar at [`locate_jar`] and scores `cands` against `refs` once.
pub fn meteor_corpus<R, S, C>(refs: &[R], cands: &[C]) -> Result<(f64, Vec<f64>), MeteorError>
where
    R: AsRef<[S]>,
    S: AsRef<str>,
    C: AsRef<str>,
{
    Meteor::start(&locate_jar()?)?.compute_score(refs, cands)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_text_is_normalised_like_pycocoevalcap_hypotheses() {
        assert_eq!(
            protocol_text("a  dog ||| on\nthe  grass "),
            "a dog on the grass"
        );
        assert_eq!(protocol_text(""), "");
    }

    #[test]
    fn missing_jar_names_how_to_install_it() {
        let err = Meteor::start(Path::new("/nonexistent/meteor-1.5.jar"))
            .err()
            .expect("no jar there");
        let msg = err.to_string();
        assert!(msg.contains("pip install pycocoevalcap"), "{msg}");
        assert!(msg.contains("/nonexistent/meteor-1.5.jar"), "{msg}");
    }
}
