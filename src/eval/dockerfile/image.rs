//! The base image a Dockerfile names, and the ENTRYPOINT it may add.

/// Base images whose userland a Debian host with python3, git, gcc and cargo stands in for.
const GENERIC_BASES: &[&str] = &[
    "debian",
    "ubuntu",
    "python",
    "buildpack-deps",
    "rust",
    "gcc",
    "ghcr.io/laude-institute/t-bench/ubuntu-24-04",
    "ghcr.io/laude-institute/t-bench/python-3-13",
];

/// Registry hosts that serve Docker Hub's official images under `library/` (or, for ECR's
/// public gallery, `docker/library/`): `public.ecr.aws/docker/library/python` is `python`.
const OFFICIAL_MIRRORS: &[&str] = &[
    "public.ecr.aws/docker/library/",
    "mirror.gcr.io/library/",
    "index.docker.io/library/",
    "registry-1.docker.io/library/",
    "registry.hub.docker.com/library/",
    "docker.io/library/",
    "library/",
];

/// An image repository without the registry prefixes of Docker Hub's official images.
fn official_image(repo: &str) -> &str {
    OFFICIAL_MIRRORS
        .iter()
        .find_map(|p| repo.strip_prefix(p))
        .or_else(|| repo.strip_prefix("docker.io/"))
        .unwrap_or(repo)
}

/// Whether an ENTRYPOINT only runs the container's command: none, a shell, or an init that
/// execs it (`tini --`, `dumb-init`).
pub(super) fn only_starts_the_command(words: &[String]) -> bool {
    let name = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    match words.first().map(|w| name(w)).as_deref() {
        None => true,
        Some("sh" | "bash" | "dash" | "zsh") => words[1..]
            .iter()
            .all(|w| matches!(w.as_str(), "-c" | "-l" | "-lc" | "--login" | "-e")),
        Some("tini" | "tini-static" | "dumb-init") => words[1..].iter().all(|w| w.starts_with('-')),
        _ => false,
    }
}

/// Whether `image` (`python:3.13-slim`, `docker.io/library/debian@sha256:…`) is one of the
/// [`GENERIC_BASES`]: its repository without tag, digest or an official mirror's prefix.
pub(super) fn is_generic_base(image: &str) -> bool {
    let repo = image.split(['@']).next().unwrap_or("");
    let repo = match repo.rfind(':') {
        Some(colon) if !repo[colon..].contains('/') => &repo[..colon],
        _ => repo,
    };
    let repo = official_image(repo);
    GENERIC_BASES.contains(&repo)
}
