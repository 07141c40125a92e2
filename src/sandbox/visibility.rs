//! What of the host a sandboxed command sees besides its workspace: the user's home as an
//! allow-list view (toolchains and what the user names are visible, the rest is an empty
//! read-only folder), the credentials hidden on top of that, and the host's pathname unix
//! sockets masked so a command cannot connect to a daemon of the host.

use std::collections::BTreeSet;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::bwrap::Bwrap;

/// Credentials one folder down a toolchain's tree (`*` is any one name): npm's global
/// configuration of every Node version nvm installed, Julia's package-server tokens.
const HOME_SECRETS_PER_VERSION: &[(&str, &str)] = &[
    (".nvm/versions/node", "etc/npmrc"),
    (".nvm/versions/io.js", "etc/npmrc"),
    (".volta/tools/image/node", "etc/npmrc"),
    (".local/share/fnm/node-versions", "installation/etc/npmrc"),
    (".local/share/mise/installs/node", "etc/npmrc"),
    (".local/share/mise/installs/python", "pip.conf"),
    (".pyenv/versions", "pip.conf"),
    (".julia/servers", "auth.toml"),
];

/// The credential paths of `home` ([`crate::protocol::HOME_CREDENTIALS`], and [`HOME_SECRETS_PER_VERSION`] for
/// each version present), and baton's own folders where the XDG variables put them
/// ([`baton_dirs`]).
pub fn home_secrets(home: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = crate::protocol::HOME_CREDENTIALS
        .iter()
        .map(|s| home.join(s))
        .collect();
    out.extend(moved_secrets());
    for (parent, inside) in HOME_SECRETS_PER_VERSION {
        out.extend(per_version(&home.join(parent), inside));
    }
    let linked = linked_from(home);
    let copies = copies_of(&out, home);
    out.extend(copies);
    out.extend(linked);
    for own in baton_dirs() {
        if !out.contains(&own) {
            out.push(own);
        }
    }
    out
}

/// The credentials of [`crate::protocol::HOME_CREDENTIALS`] where a variable moved their
/// folder out of the home (round 31: `XDG_CONFIG_HOME=/opt/x` held `git/credentials`,
/// `CARGO_HOME=/usr/local/cargo` its `credentials.toml`), and those a variable names itself
/// ([`CREDENTIAL_VARIABLES`]); also when there is no home.
pub fn moved_secrets() -> Vec<PathBuf> {
    let mut out = variable_secrets();
    for (in_home, elsewhere) in relocated_folders() {
        for rel in crate::protocol::HOME_CREDENTIALS {
            if let Ok(inside) = Path::new(rel).strip_prefix(in_home) {
                out.push(elsewhere.join(inside));
            }
        }
        // And one folder down a moved toolchain's tree (`$VOLTA_HOME/tools/image/node/*`),
        // with no home to hold it too (round 34).
        for (parent, inside) in HOME_SECRETS_PER_VERSION {
            if let Ok(rest) = Path::new(parent).strip_prefix(in_home) {
                out.extend(per_version(&elsewhere.join(rest), inside));
            }
        }
    }
    out
}

/// `inside` of every folder of `root` (each version a toolchain installed there).
fn per_version(root: &Path, inside: &str) -> Vec<PathBuf> {
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|v| v.path().join(inside))
        .collect()
}

/// Variables that move one credential out of the home by naming it themselves (round 32:
/// `GNUPGHOME=/srv/gpg`, `KUBECONFIG`, `AWS_SHARED_CREDENTIALS_FILE`,
/// `GOOGLE_APPLICATION_CREDENTIALS` as CI images and shared machines set them): the file or
/// folder named, or the credential files inside the folder named. The variables themselves
/// never reach commands (their names look secret, or they name a folder of the home); the
/// files they name are hidden like the home's.
const CREDENTIAL_VARIABLES: &[(&str, &[&str])] = &[
    ("GNUPGHOME", &[]),
    ("KUBECONFIG", &[]),
    ("PASSWORD_STORE_DIR", &[]),
    ("CLOUDSDK_CONFIG", &[]),
    ("AZURE_CONFIG_DIR", &[]),
    ("AWS_SHARED_CREDENTIALS_FILE", &[]),
    ("AWS_CONFIG_FILE", &[]),
    ("AWS_WEB_IDENTITY_TOKEN_FILE", &[]),
    ("AZURE_FEDERATED_TOKEN_FILE", &[]),
    ("GOOGLE_APPLICATION_CREDENTIALS", &[]),
    ("GOOGLE_GHA_CREDS_PATH", &[]),
    ("CODEX_HOME", &["auth.json"]),
    ("CLAUDE_CONFIG_DIR", &[".credentials.json"]),
    ("HF_HOME", &["token", "stored_tokens"]),
    ("HF_TOKEN_PATH", &[]),
    ("NETRC", &[]),
    ("RCLONE_CONFIG", &[]),
    ("KAGGLE_CONFIG_DIR", &["kaggle.json"]),
    ("TF_CLI_CONFIG_FILE", &[]),
    ("REGISTRY_AUTH_FILE", &[]),
    ("OCI_CLI_CONFIG_FILE", &[]),
    ("BOTO_CONFIG", &[]),
    ("NPM_CONFIG_USERCONFIG", &[]),
    ("npm_config_userconfig", &[]),
    ("PIP_CONFIG_FILE", &[]),
    ("PGPASSFILE", &[]),
    ("OP_CONFIG_DIR", &[]),
    ("VAULT_CONFIG_PATH", &[]),
    ("SOPS_AGE_KEY_FILE", &[]),
    ("ANSIBLE_VAULT_PASSWORD_FILE", &[]),
    ("COMPOSER_HOME", &["auth.json"]),
    ("MYSQL_HOME", &["my.cnf"]),
    ("HISTFILE", &[]),
    ("IPYTHONDIR", &["profile_default/history.sqlite"]),
    ("DOCKER_CERT_PATH", &["key.pem"]),
    ("PULUMI_HOME", &["credentials.json"]),
    ("TELEPORT_HOME", &["keys"]),
    ("HELM_REGISTRY_CONFIG", &[]),
    ("POETRY_CONFIG_DIR", &["auth.toml"]),
    ("UV_CONFIG_FILE", &[]),
    ("BUNDLE_USER_CONFIG", &[]),
    ("CURL_HOME", &[".curlrc"]),
    ("WGETRC", &[]),
    ("CONDARC", &[]),
    ("MYSQL_TEST_LOGIN_FILE", &[]),
    ("PGSERVICEFILE", &[]),
    // Round 34.
    ("ZDOTDIR", &[".zsh_history", ".zhistory"]),
    ("JULIA_DEPOT_PATH", &["logs", "servers"]),
    ("DOTNET_CLI_HOME", &[".dotnet/corefx"]),
    ("TERRAFORM_CONFIG", &[]),
    ("S3CMD_CONFIG", &[]),
    ("BITWARDENCLI_APPDATA_DIR", &[]),
    ("HCLOUD_CONFIG", &[]),
    ("HELM_CONFIG_HOME", &["registry", "repositories.yaml"]),
    (
        "MINIKUBE_HOME",
        &["profiles", "ca.key", "proxy-client-ca.key"],
    ),
    (
        "VAGRANT_HOME",
        &["insecure_private_key", "insecure_private_keys"],
    ),
    ("SUBVERSION_CONFIG_DIR", &["auth"]),
    ("OS_CLIENT_CONFIG_FILE", &[]),
    ("DATABRICKS_CONFIG_FILE", &[]),
    ("ODBCINI", &[]),
    ("TALOSCONFIG", &[]),
    ("MC_CONFIG_DIR", &[]),
    ("GLAB_CONFIG_DIR", &[]),
    ("R_ENVIRON_USER", &[]),
    ("ANSIBLE_CONFIG", &[]),
    ("HUB_CONFIG", &[]),
    ("JFROG_CLI_HOME_DIR", &[]),
    ("LFTP_HOME", &[]),
    ("TNS_ADMIN", &["cwallet.sso", "ewallet.p12"]),
    // Round 35.
    ("KUBE_CONFIG_PATH", &[]),
    ("KRB5_KTNAME", &[]),
    ("KRB5_CLIENT_KTNAME", &[]),
    ("DBT_PROFILES_DIR", &["profiles.yml"]),
    ("JUPYTER_RUNTIME_DIR", &[]),
    ("STEPPATH", &["secrets", "config"]),
    ("CONAN_HOME", &["credentials.json", ".conan_db"]),
    ("NIX_USER_CONF_FILES", &[]),
    ("SNOWFLAKE_HOME", &["config.toml", "connections.toml"]),
    ("NGROK_CONFIG", &[]),
    ("TUNNEL_ORIGIN_CERT", &[]),
    ("ANDROID_USER_HOME", &["adbkey"]),
    ("IBMCLOUD_HOME", &[]),
    ("SCW_CONFIG_PATH", &[]),
    (
        "LEIN_HOME",
        &["credentials.clj", "credentials.clj.gpg", "profiles.clj"],
    ),
    ("COURSIER_CONFIG_DIR", &["credentials.properties"]),
    ("ATUIN_DB_PATH", &[]),
    ("DVC_GLOBAL_CONFIG_DIR", &["config"]),
    ("PDM_CONFIG_FILE", &[]),
    ("HATCH_CONFIG", &[]),
    ("GEMRC", &[]),
    ("BUNDLE_APP_CONFIG", &["config"]),
    ("WANDB_CONFIG_DIR", &["settings"]),
    ("GOPASS_HOMEDIR", &[]),
];

/// The credentials [`CREDENTIAL_VARIABLES`] name in this process's environment (`KUBECONFIG`
/// may list several files). Only absolute paths at least two folders deep, outside `/dev`,
/// `/proc` and `/sys` (`HISTFILE=/dev/null` names no history, and a cover of `/opt` would
/// hide every toolchain there).
fn variable_secrets() -> Vec<PathBuf> {
    let mut out = Vec::new();
    // No list of such variables is complete (round 33: `PSQL_HISTORY`, `GIT_SSL_KEY`,
    // `ANSIBLE_PRIVATE_KEY_FILE`…): any variable named like a credential or a history names
    // one whole.
    let named_like_one: Vec<(String, std::ffi::OsString)> = std::env::vars_os()
        .filter_map(|(name, value)| {
            let name = name.into_string().ok()?;
            let like =
                super::env::looks_secret(&name) || name.to_ascii_uppercase().contains("HIST");
            (like && !names_trust_anchors(&name)).then_some((name, value))
        })
        .collect();
    // Their value may hold the path after an option or in quotes (`--key=/opt/ci/k`,
    // `"/opt/ci/k"`, round 34): each part between blanks, `=`, `,`, `;`, `:` and quotes.
    let by_name = named_like_one.iter().map(|(name, value)| {
        let parts: Vec<String> = value
            .to_string_lossy()
            .split([' ', '\t', '=', ',', ';', ':', '"', '\''])
            .filter(|p| p.starts_with('/'))
            .map(str::to_string)
            .collect();
        let joined = std::env::join_paths(parts.iter().map(Path::new)).unwrap_or_default();
        (name.as_str(), joined, &[][..])
    });
    let listed = CREDENTIAL_VARIABLES
        .iter()
        .filter_map(|(var, inside)| std::env::var_os(var).map(|value| (*var, value, *inside)));
    // The key CI hands ssh in `GIT_SSH_COMMAND="ssh -i /opt/ci/deploy_key"`.
    out.extend(ssh_identities());
    for (_, value, inside) in listed.chain(by_name) {
        for named in std::env::split_paths(&value) {
            if !names_a_secret(&named) {
                continue;
            }
            if inside.is_empty() {
                out.push(named);
            } else {
                out.extend(inside.iter().map(|file| named.join(file)));
            }
        }
    }
    out
}

/// Whether a variable named like a credential's names the certificates of the authorities a
/// program trusts (`AWS_CA_BUNDLE`, `VAULT_CACERT`): public, and hiding them breaks every TLS
/// connection a command with the network makes (CI images point such variables at the
/// system's `/etc/ssl/certs/ca-certificates.crt`).
fn names_trust_anchors(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "CA_BUNDLE",
        "CAINFO",
        "CACERT",
        "CA_CERT",
        "CAFILE",
        "CAPATH",
        "CA_FILE",
        "CA_PATH",
    ]
    .iter()
    .any(|w| upper.contains(w))
}

/// The host's own secrets in the system folders, which only root (or a group of the system)
/// reads: password hashes, sudo rules, TLS and VPN private keys, cluster admin configs,
/// keytabs. A command run by root is root without capabilities, still the owner of these
/// (red team round 32: `head /etc/shadow`, `/etc/ssl/private`).
const HOST_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/security/opasswd",
    "/etc/ssl/private",
    "/etc/pki/tls/private",
    "/etc/pki/CA/private",
    "/etc/letsencrypt",
    "/etc/kubernetes",
    "/etc/rancher",
    "/etc/wireguard",
    "/etc/openvpn",
    "/etc/gitlab-runner",
    "/etc/mysql/debian.cnf",
    "/etc/ipsec.secrets",
    "/etc/ppp/chap-secrets",
    "/etc/ppp/pap-secrets",
    "/etc/krb5.keytab",
    "/etc/NetworkManager/system-connections",
];

/// Those of [`HOST_SECRETS`] present here with something in them (an empty `opasswd` or
/// `ssl/private` hides nothing, and each cover is a mount more for every command), and the
/// host's SSH private keys (`/etc/ssh/ssh_host_*_key`).
pub fn host_secrets() -> Vec<PathBuf> {
    let holds_something = |p: &PathBuf| match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::read_dir(p).map_or(true, |mut d| d.next().is_some()),
        Ok(m) => m.len() > 0 || !m.is_file(),
        Err(_) => false,
    };
    let mut out: Vec<PathBuf> = HOST_SECRETS
        .iter()
        .map(PathBuf::from)
        .filter(holds_something)
        .collect();
    for e in std::fs::read_dir("/etc/ssh")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("ssh_host_") && name.ends_with("_key") {
            out.push(e.path());
        }
    }
    out
}

/// The other paths that show the folders `paths` (canonical) through bind mounts: a home
/// bound at `/home/me` from `/data/home/me` (fstab, a data disk) is also at
/// `/data/home/me`, where a cover of `/home/me` does not reach (red team round 33). Read
/// from this process's `/proc/self/mountinfo`: each path's place on its filesystem, then
/// every mount of that filesystem showing the place.
pub fn bind_aliases(paths: &[PathBuf]) -> Vec<PathBuf> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    bind_aliases_in(&table, paths)
}

fn bind_aliases_in(mountinfo: &str, paths: &[PathBuf]) -> Vec<PathBuf> {
    // (device, root on the device, mount point), in mount order.
    let mounts: Vec<(&str, PathBuf, PathBuf)> = mountinfo
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            Some((*f.get(2)?, unescape(f.get(3)?), unescape(f.get(4)?)))
        })
        .collect();
    let mut out: Vec<PathBuf> = Vec::new();
    for path in paths {
        // The mount that shows `path`: the deepest mount point above it, the last mounted.
        let Some((dev, root, point)) = mounts
            .iter()
            .filter(|(_, _, point)| path.starts_with(point))
            .max_by_key(|(_, _, point)| point.components().count())
        else {
            continue;
        };
        let Ok(rest) = path.strip_prefix(point) else {
            continue;
        };
        let place = root.join(rest);
        for (other_dev, other_root, other_point) in &mounts {
            let Ok(inside) = place.strip_prefix(other_root) else {
                continue;
            };
            let alias = other_point.join(inside);
            if other_dev == dev && alias != *path && !out.contains(&alias) && alias.is_dir() {
                out.push(alias);
            }
        }
    }
    out
}

/// A mountinfo field with its octal escapes (`\040` for a blank) undone.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(out))
}

/// Whether a path a variable gives may be hidden as a secret: absolute, two folders deep or
/// more (a cover of `/opt` would hide every toolchain there), outside `/dev`, `/proc` and
/// `/sys` (`HISTFILE=/dev/null` names no history).
fn names_a_secret(path: &Path) -> bool {
    let deep = path.is_absolute() && path.components().count() > 2;
    deep && !["/dev", "/proc", "/sys"]
        .iter()
        .any(|k| path.starts_with(k))
}

/// The identity files `GIT_SSH_COMMAND`, `RSYNC_RSH`, `BORG_RSH` and `ANSIBLE_SSH_ARGS` give
/// ssh (`-i FILE`, `-iFILE`, `-o IdentityFile=FILE`).
fn ssh_identities() -> Vec<PathBuf> {
    let words: Vec<String> = [
        "GIT_SSH_COMMAND",
        "RSYNC_RSH",
        "BORG_RSH",
        "ANSIBLE_SSH_ARGS",
    ]
    .iter()
    .filter_map(|v| std::env::var(v).ok())
    .filter_map(|c| shlex::split(&c))
    .flatten()
    .collect();
    let mut out = Vec::new();
    let mut next_is_key = false;
    for word in &words {
        let named = if next_is_key {
            next_is_key = false;
            Some(word.as_str())
        } else if word == "-i" {
            next_is_key = true;
            None
        } else if let Some(glued) = word.strip_prefix("-i") {
            Some(glued)
        } else {
            let option = word.strip_prefix("-o").unwrap_or(word);
            option
                .split_once('=')
                .filter(|(k, _)| k.trim().eq_ignore_ascii_case("IdentityFile"))
                .map(|(_, v)| v.trim())
        };
        if let Some(path) = named.map(PathBuf::from).filter(|p| names_a_secret(p)) {
            out.push(path);
        }
    }
    out
}

/// Where the people of this machine keep their files, but the user's `$HOME` (`own`,
/// canonical) and the folders above it: every folder of `/home`, `/root`, and the home
/// `/etc/passwd` gives each account from uid 1000 up (`nobody` aside, and no upper bound:
/// directory services number people above 65535) wherever it is, when that account owns it
/// — the running account's own too, when `$HOME` points elsewhere (round 32: CI's
/// `HOME=/github/home` left `/srv/alice` shown). Each where it really lies: a home linked to
/// a data disk is covered at its target (a command's path through the link lands there, and
/// bubblewrap cannot make a mount point through a linked folder).
pub fn account_homes(own: Option<&Path>) -> Vec<PathBuf> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    account_homes_in(&passwd, own)
}

fn account_homes_in(passwd: &str, own: Option<&Path>) -> Vec<PathBuf> {
    let listed = std::fs::read_dir("/home")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .chain(std::iter::once(PathBuf::from("/root")))
        .filter_map(|p| p.canonicalize().ok());
    let people = people_homes(passwd).into_iter().filter_map(|(uid, home)| {
        let real = home.canonicalize().ok()?;
        let owned = std::fs::symlink_metadata(&real)
            .is_ok_and(|m| m.is_dir() && std::os::unix::fs::MetadataExt::uid(&m) == uid);
        (owned && real.components().count() > 2).then_some(real)
    });
    let mut out: Vec<PathBuf> = Vec::new();
    for home in listed.chain(people) {
        let theirs = own.is_none_or(|h| home != h && !h.starts_with(&home));
        if theirs && home.parent().is_some() && !out.contains(&home) {
            out.push(home);
        }
    }
    out
}

/// The homes of the people `passwd` lists (uid 1000 and above, as `useradd` numbers them,
/// not `nobody`): where their files are, whatever folder holds them. Service accounts' homes
/// (`/var/lib/postgresql`, `/var/cache/man`) are system folders and stay as the host shows
/// them.
fn people_homes(passwd: &str) -> Vec<(u32, PathBuf)> {
    passwd
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let uid: u32 = fields.get(2)?.parse().ok()?;
            let home = Path::new(fields.get(5)?);
            let person = uid >= 1000 && uid != 65534 && uid != u32::MAX;
            let somewhere = home.is_absolute() && home.components().count() > 2;
            (person && somewhere).then(|| (uid, home.to_path_buf()))
        })
        .collect()
}

/// Folders of the home that a variable can move elsewhere (`XDG_CONFIG_HOME` for `.config`,
/// `CARGO_HOME` for `.cargo` …), with where the variables of this process put them (absolute
/// values only).
fn relocated_folders() -> Vec<(&'static str, PathBuf)> {
    const MOVED_BY: &[(&str, &str)] = &[
        (".config", "XDG_CONFIG_HOME"),
        (".local/share", "XDG_DATA_HOME"),
        (".local/state", "XDG_STATE_HOME"),
        (".cache", "XDG_CACHE_HOME"),
        (".cargo", "CARGO_HOME"),
        (".rustup", "RUSTUP_HOME"),
        (".nvm", "NVM_DIR"),
        (".pyenv", "PYENV_ROOT"),
        (".gradle", "GRADLE_USER_HOME"),
        (".docker", "DOCKER_CONFIG"),
        (".config/gh", "GH_CONFIG_DIR"),
        (".m2", "MAVEN_USER_HOME"),
        (".npm", "NPM_CONFIG_CACHE"),
        (".volta", "VOLTA_HOME"),
        (".local/share/fnm", "FNM_DIR"),
        (".local/share/mise", "MISE_DATA_DIR"),
        (".npm-global", "NPM_CONFIG_PREFIX"),
        (".rye", "RYE_HOME"),
        (".cabal", "CABAL_DIR"),
    ];
    MOVED_BY
        .iter()
        .filter_map(|(in_home, var)| {
            let dir = PathBuf::from(std::env::var_os(var)?);
            dir.is_absolute().then_some((*in_home, dir))
        })
        .collect()
}

/// Where the links inside the home's credential folders lead (`~/.ssh/id_rsa ->
/// ~/dotfiles/ssh/id_rsa`, as GNU stow links file by file once `~/.ssh` exists; red team
/// round 34): each credential hidden where it really is, whatever shows it there. The folders
/// of [`LINKED_CREDENTIAL_FOLDERS`] are walked to three levels, 2,000 entries at most (not
/// the browsers' profiles: thousands of files, at every command).
fn linked_from(home: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut budget = 2_000usize;
    let mut stack: Vec<(PathBuf, usize)> = LINKED_CREDENTIAL_FOLDERS
        .iter()
        .map(|f| home.join(f))
        .filter(|s| std::fs::symlink_metadata(s).is_ok_and(|m| m.is_dir()))
        .map(|s| (s, 0))
        .collect();
    while let Some((dir, depth)) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if budget == 0 {
                return out;
            }
            budget -= 1;
            match entry.file_type() {
                Ok(t) if t.is_symlink() => out.extend(entry.path().canonicalize()),
                Ok(t) if t.is_dir() && depth < 3 => stack.push((entry.path(), depth + 1)),
                _ => {}
            }
        }
    }
    out
}

/// The credential folders of the home a dotfiles manager links into, file by file.
const LINKED_CREDENTIAL_FOLDERS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".oci",
    ".kaggle",
    ".password-store",
    ".local/share/keyrings",
    ".config/gh",
    ".config/gcloud",
    ".config/op",
    ".config/rclone",
];

/// The copies editors and people leave beside a credential inside a folder of the home
/// (`credentials.toml.bak`, `settings.xml~`, vim's `.settings.xml.swp`, emacs's
/// `#config#`): each folder holding one of `secrets` is listed once, and every entry whose
/// name is a secret's name with anything around it is hidden with it. Files directly in the
/// home need none: the home view shows none of its files but those the user names.
fn copies_of(secrets: &[PathBuf], home: &Path) -> Vec<PathBuf> {
    let mut by_folder: Vec<(&Path, Vec<&std::ffi::OsStr>)> = Vec::new();
    for s in secrets {
        let (Some(folder), Some(name)) = (s.parent(), s.file_name()) else {
            continue;
        };
        if folder == home {
            continue;
        }
        match by_folder.iter_mut().find(|(f, _)| *f == folder) {
            Some((_, names)) => names.push(name),
            None => by_folder.push((folder, vec![name])),
        }
    }
    let mut out = Vec::new();
    for (folder, names) in by_folder {
        let Ok(rd) = std::fs::read_dir(folder) else {
            continue;
        };
        for e in rd.flatten() {
            let entry = e.file_name();
            if names
                .iter()
                .any(|n| is_copy_of(entry.as_encoded_bytes(), n.as_encoded_bytes()))
            {
                out.push(e.path());
            }
        }
    }
    out
}

/// `entry` is `name` with a suffix that does not go on with the name (`.bak`, `~`, `.swp`,
/// not `credentialsd`), or with a `.` or `#` before it (vim's swap file, emacs's autosave).
fn is_copy_of(entry: &[u8], name: &[u8]) -> bool {
    let marked = [&b"."[..], b"#"]
        .iter()
        .find_map(|m| entry.strip_prefix(*m)?.strip_prefix(name));
    if let Some(rest) = marked {
        return rest.first().is_none_or(|c| !c.is_ascii_alphanumeric());
    }
    entry
        .strip_prefix(name)
        .and_then(|rest| rest.first())
        .is_some_and(|c| !c.is_ascii_alphanumeric())
}

/// baton's own folders (`protocol::baton_own_dirs`, the list the configuration asks too):
/// commands never see them and the file tools never touch them.
pub fn baton_dirs() -> Vec<PathBuf> {
    crate::protocol::baton_own_dirs()
}

/// Why the file tools may not touch a path ([`Hidden::hides`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hiding {
    /// In one of [`baton_dirs`]: baton's own configuration and state.
    BatonOwn,
    /// The bubblewrap world of the policy does not show it to commands: a credential of the
    /// deny-list, the part of the home the view leaves out, another user's home, the host's
    /// `/tmp`, `/run`, `/proc`.
    Sandbox,
}

impl Hiding {
    /// For the model: why, and what it can do instead.
    pub fn explain(self) -> &'static str {
        match self {
            Hiding::BatonOwn => {
                "it is baton's own configuration or state (hooks, settings, the trust list, \
                 sessions), which the model may neither read nor change"
            }
            Hiding::Sandbox => {
                "the sandbox hides it from commands (a credential, another user's files or \
                 a host folder outside the workspace's view), and the file tools show the \
                 model no more than commands see"
            }
        }
    }
}

/// What the sandbox hides from commands, as one value the file tools consult: the world
/// bubblewrap builds for the policy ([`super::bwrap::world`], the same function a launch
/// calls) says, for each path, whether a command sees the host's file there; baton's own
/// folders ([`baton_dirs`]) are hidden on top, whatever the workspace.
#[derive(Debug, Clone)]
pub struct Hidden {
    /// The world, or why it could not be made (then the deny-list alone is consulted).
    world: Result<super::bwrap::Bwrap, Vec<PathBuf>>,
    /// [`baton_dirs`], resolved.
    own: Vec<PathBuf>,
}

impl Hidden {
    /// The answer for `policy`, as the disk is now (a credential created later is judged by
    /// the next value, as the next command's world would be).
    pub fn of(policy: &super::SandboxPolicy) -> Hidden {
        let own: Vec<PathBuf> = baton_dirs()
            .iter()
            .map(|d| crate::untrusted_fs::real_or_planned(d))
            .collect();
        let world = super::bwrap::world_to_inspect(policy).map_err(|_| {
            // The world cannot be made (a writable root cannot be opened): commands cannot
            // start either; the file tools still keep to the deny-list.
            let roots: Vec<PathBuf> = std::iter::once(&policy.workspace)
                .chain(&policy.writable)
                .filter_map(|p| p.canonicalize().ok())
                .collect();
            dirs::home_dir()
                .map(|h| home_secrets(&h))
                .unwrap_or_default()
                .iter()
                .filter(|s| std::fs::symlink_metadata(s).is_ok())
                .filter_map(|s| s.canonicalize().ok())
                .filter(|s| !roots.iter().any(|r| r.starts_with(s)))
                .collect()
        });
        Hidden { world, own }
    }

    /// A value that hides nothing, for tests of what else a walk skips.
    #[cfg(test)]
    pub fn nothing() -> Hidden {
        Hidden {
            world: Err(Vec::new()),
            own: Vec::new(),
        }
    }

    /// Whether, and why, `path` (absolute, links resolved: where a command would find it) is
    /// out of the model's sight: commands don't see the host's file there, or it is baton's
    /// own.
    pub fn hides(&self, path: &Path) -> Option<Hiding> {
        if self.own.iter().any(|d| path.starts_with(d)) {
            return Some(Hiding::BatonOwn);
        }
        let hidden = match &self.world {
            Ok(world) => !world.shows_host(path),
            Err(secrets) => secrets.iter().any(|s| path.starts_with(s)),
        };
        hidden.then_some(Hiding::Sandbox)
    }
}

/// What commands see of the home, read-only, relative to it: toolchains and version managers
/// (their programs and the package caches an offline build needs) and git's own settings
/// (the identity a commit needs). Whatever else the home holds (documents, keys, the
/// configuration of every other program) is out of sight unless the user names it.
pub const HOME_TOOLCHAINS: &[&str] = &[
    ".cargo",
    ".rustup",
    ".local/bin",
    ".local/lib",
    ".local/share/uv",
    ".local/share/pnpm",
    ".local/share/fnm",
    ".local/share/mise",
    ".cache/uv",
    ".cache/pip",
    ".npm",
    ".npm-global",
    ".nvm",
    ".volta",
    ".bun",
    ".deno",
    ".pyenv",
    ".rye",
    ".rbenv",
    ".gem",
    ".sdkman",
    ".gradle",
    ".m2",
    ".dotnet",
    ".ghcup",
    ".cabal",
    ".opam",
    ".juliaup",
    ".julia",
    ".elan",
    ".nix-profile",
    "go",
    ".gitconfig",
    // What git reads there by itself; not the rest of the folder, where users keep what their
    // config names: a `store --file` token file, TLS and signing keys, cookies (round 36).
    ".config/git/config",
    ".config/git/ignore",
    ".config/git/attributes",
];

/// The start-up files a login shell reads (`[sandbox] login_shell`): shown only then, since
/// they often export tokens.
pub const LOGIN_PROFILES: &[&str] = &[".profile", ".bash_profile", ".bash_login", ".bashrc"];

/// Replaces the home (`home`, canonical) with an empty tmpfs showing, read-only, the
/// toolchain folders and `readable` paths inside it that exist. The caller binds the
/// writable roots afterwards (a workspace in the home stays writable) and ends with
/// [`seal_home`].
pub(super) fn home_view(
    b: &mut Bwrap,
    home: &Path,
    readable: &[PathBuf],
    roots: &[PathBuf],
    opener: &mut super::bwrap::HeldOpener,
) -> Result<(), super::SandboxError> {
    b.tmpfs(home);
    let named = HOME_TOOLCHAINS
        .iter()
        .map(|e| home.join(e))
        .chain(readable.iter().filter(|p| p.starts_with(home)).cloned());
    // One `lstat` rules out what is not there. A `~/.cargo` linked elsewhere shows as a folder
    // with the link's contents: what it led to the first time is bound (by descriptor, like
    // every bind of what a command could rename: the home may hold another session's
    // workspace).
    let mut shown: Vec<PathBuf> = Vec::new();
    for entry in named {
        // What lies in a writable root is bound with it, later (and would cover this bind).
        if std::fs::symlink_metadata(&entry).is_err()
            || shown.iter().any(|s| entry.starts_with(s))
            || roots.iter().any(|r| entry.starts_with(r))
        {
            continue;
        }
        let Some(real) = super::policy::resolved_once(&entry) else {
            continue;
        };
        let dir = real.is_dir();
        b.bind_held(opener.open(&real, dir)?, &entry, false)?;
        shown.push(entry);
    }
    Ok(())
}

/// The XDG folders a variable moved out of the home (`XDG_CONFIG_HOME=/data/cfg`): the home's
/// own configuration, data, state and cache, shown as the home is (round 33: Copilot's
/// token, `kaggle.json`, `pip.conf`, nvim's shada in them were shown, only a list of
/// credentials hidden). Each as an empty tmpfs showing, read-only, the toolchain folders the
/// home view shows there (`git`, `uv`, `pip` …) and what the user names; the caller seals
/// the returned folders with [`seal_home`] once the writable roots are bound (a workspace
/// inside one stays writable, bound after the view).
pub(super) fn moved_home_views(
    b: &mut Bwrap,
    home: Option<&Path>,
    readable: &[PathBuf],
    roots: &[PathBuf],
    opener: &mut super::bwrap::HeldOpener,
) -> Result<Vec<PathBuf>, super::SandboxError> {
    const MOVED: &[(&str, &str)] = &[
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_DATA_HOME", ".local/share"),
        ("XDG_STATE_HOME", ".local/state"),
        ("XDG_CACHE_HOME", ".cache"),
    ];
    let mut viewed: Vec<PathBuf> = Vec::new();
    for (var, in_home) in MOVED {
        let Some(dir) = std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|d| d.is_absolute())
            .and_then(|d| d.canonicalize().ok())
        else {
            continue;
        };
        let inside_home = home.is_some_and(|h| dir.starts_with(h));
        // A folder inside a writable root is the command's to write; one holding the
        // workspace (`$XDG_CONFIG_HOME/nvim` worked on) gets the view, and the workspace is
        // bound back inside it afterwards, as in the home (round 35).
        let in_a_root = roots.iter().any(|r| dir.starts_with(r));
        if inside_home
            || in_a_root
            || dir.components().count() <= 2
            || !dir.is_dir()
            || !b.shows_host(&dir)
            || !b.lands_without_links(&dir)
            || !reachable_in_sandbox(&dir)
            || viewed
                .iter()
                .any(|v| dir.starts_with(v) || v.starts_with(&dir))
        {
            continue;
        }
        b.tmpfs(&dir);
        let toolchains = HOME_TOOLCHAINS.iter().filter_map(|t| {
            let rest = Path::new(t).strip_prefix(in_home).ok()?;
            (!rest.as_os_str().is_empty()).then(|| dir.join(rest))
        });
        let named = readable.iter().filter(|p| p.starts_with(&dir)).cloned();
        let mut shown: Vec<PathBuf> = Vec::new();
        for entry in toolchains.chain(named) {
            if std::fs::symlink_metadata(&entry).is_err()
                || shown.iter().any(|s| entry.starts_with(s))
            {
                continue;
            }
            let Some(real) = super::policy::resolved_once(&entry) else {
                continue;
            };
            b.bind_held(opener.open(&real, real.is_dir())?, &entry, false)?;
            shown.push(entry);
        }
        viewed.push(dir);
    }
    Ok(viewed)
}

/// Whether `path` (absolute) lies in the user's home where the bubblewrap sandbox of `policy`
/// does not show it: outside the toolchain folders, what the user named and the writable
/// roots. For telling a command's "No such file or directory" apart from a missing file.
pub fn hidden_in_home(path: &Path, policy: &super::SandboxPolicy) -> bool {
    let Some(home) = dirs::home_dir().and_then(|h| h.canonicalize().ok()) else {
        return false;
    };
    let mut roots = policy.writable_roots();
    roots.extend(policy.workspace.canonicalize());
    if policy.backend != super::Backend::Bubblewrap
        || !path.starts_with(&home)
        || roots
            .iter()
            .any(|r| home.starts_with(r) || path.starts_with(r))
    {
        return false;
    }
    let shown = HOME_TOOLCHAINS
        .iter()
        .map(|e| home.join(e))
        .chain(policy.readable.iter().cloned());
    !shown.into_iter().any(|s| path.starts_with(s))
}

/// Makes the home's tmpfs read-only, after every mount inside it was made (the mounts inside
/// keep their own flags): commands write their home nowhere but in a writable root.
pub(super) fn seal_home(b: &mut Bwrap, home: &Path) {
    b.remount_ro(home);
}

/// Whether the user's `readable` list names `secret` or something inside it: the one way to
/// show a hidden credential.
/// baton's own folders are never shown ([`baton_dirs`]).
pub(super) fn named_by_user(secret: &Path, readable: &[PathBuf]) -> bool {
    let own = baton_dirs()
        .iter()
        .map(|d| crate::untrusted_fs::real_or_planned(d))
        .any(|d| secret.starts_with(&d));
    !own && readable.iter().any(|r| r.starts_with(secret))
}

/// The pathname unix sockets bound in this network namespace (`/proc/net/unix`): the daemons
/// of the host (a database, a container engine, an agent) that a command must not reach.
/// Sockets bound in other network namespaces are not listed.
pub(super) fn host_sockets() -> BTreeSet<PathBuf> {
    std::fs::read_to_string("/proc/net/unix")
        .map(|table| parse_unix_table(&table))
        .unwrap_or_default()
}

/// The paths of a `/proc/net/unix` table (`Num RefCount Protocol Flags Type St Inode Path`):
/// abstract names (`@…`) and unbound sockets left out.
fn parse_unix_table(table: &str) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for line in table.lines().skip(1) {
        let mut rest = line.trim_start();
        // Seven fields, separated by runs of spaces, before the path (which may hold spaces).
        for _ in 0..7 {
            let end = rest.find(' ').unwrap_or(rest.len());
            rest = rest[end..].trim_start_matches(' ');
        }
        if rest.starts_with('/') {
            out.insert(PathBuf::from(rest));
        }
    }
    out
}

/// How long a socket must have been there before it is covered. bubblewrap fails the whole
/// command when a cover's mount point has gone (a read-only folder takes no new file), and
/// the sockets that come and go within seconds are a test's or a short-lived tool's, where a
/// daemon's stays.
pub const SOCKET_SETTLE: Duration = Duration::from_secs(10);

/// Whether the sandbox could reach `path` at all: every folder on the way lets the
/// sandbox's root in (the caller's uid and gid are its only ids; its capabilities count only
/// for a folder owned by both). A path behind a folder of another account's at mode 0700 is
/// out of every command's reach, and bubblewrap cannot cover it either (red team round 33: a
/// socket another account bound in such a folder made every sandbox of root's fail).
pub fn reachable_in_sandbox(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    let groups: Vec<u32> = rustix::process::getgroups()
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_default();
    let Some(parent) = path.parent() else {
        return true;
    };
    parent.ancestors().all(|dir| {
        let Ok(m) = std::fs::metadata(dir) else {
            return false;
        };
        let search = if m.uid() == uid && m.gid() == gid {
            return true;
        } else if m.uid() == uid {
            0o100
        } else if m.gid() == gid || groups.contains(&m.gid()) {
            0o010
        } else {
            0o001
        };
        m.mode() & search != 0
    })
}

/// Covers each socket of `sockets` that the command would see as the host's (outside its
/// writable `roots` and the user's `allowed` sockets or folders, bound more than
/// [`SOCKET_SETTLE`] ago) with an empty file: `connect` there is refused. A path that is no
/// longer a socket is left alone.
pub(super) fn mask_sockets(
    b: &mut Bwrap,
    sockets: &BTreeSet<PathBuf>,
    roots: &[PathBuf],
    allowed: &[PathBuf],
) {
    let settled = SystemTime::now() - SOCKET_SETTLE;
    for path in sockets {
        // A socket bound through a link (`current/app.sock`, `current` a link to a release)
        // is covered where it really is: bubblewrap cannot make a mount point through a link.
        let Ok(real) = path.canonicalize() else {
            continue;
        };
        let mine = roots.iter().chain(allowed).any(|r| real.starts_with(r));
        if mine || !b.shows_host(&real) || !reachable_in_sandbox(&real) {
            continue;
        }
        let cover = std::fs::symlink_metadata(&real)
            .is_ok_and(|m| m.file_type().is_socket() && m.modified().is_ok_and(|t| t <= settled));
        if cover {
            b.hide_file(&real);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_of_a_credential_are_hidden_with_it_and_its_neighbours_are_not() {
        for copy in [
            "credentials.toml.bak",
            "credentials.toml~",
            ".credentials.toml.swp",
        ] {
            assert!(is_copy_of(copy.as_bytes(), b"credentials.toml"), "{copy}");
        }
        assert!(is_copy_of(b"#config#", b"config"));
        for other in ["credentials.toml", "credentialsd", "opencode", "bin"] {
            assert!(
                !is_copy_of(other.as_bytes(), b"credentials.toml"),
                "{other}"
            );
        }
        assert!(!is_copy_of(b"opencode", b"op"));
    }

    #[test]
    fn the_unix_table_yields_bound_paths_only() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 5623607 /var/lib/db/my sock\n\
            0000000000000000: 00000003 00000000 00000000 0001 03    12 /run/a.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 33 @/tmp/.X11-unix/X0\n\
            0000000000000000: 00000002 00000000 00000000 0002 01 34\n\
            0000000000000000: 00000003 00000000 00000000 0001 03 35 /run/a.sock\n";
        let paths: Vec<PathBuf> = parse_unix_table(table).into_iter().collect();
        assert_eq!(
            paths,
            [
                PathBuf::from("/run/a.sock"),
                PathBuf::from("/var/lib/db/my sock")
            ]
        );
    }

    #[test]
    fn only_a_readable_entry_at_or_inside_a_secret_shows_it() {
        let aws = Path::new("/h/.aws");
        assert!(named_by_user(aws, &[PathBuf::from("/h/.aws")]));
        assert!(named_by_user(aws, &[PathBuf::from("/h/.aws/config")]));
        assert!(!named_by_user(aws, &[PathBuf::from("/h")]));
        assert!(!named_by_user(aws, &[]));
    }

    #[test]
    fn people_have_homes_anywhere_and_services_are_not_people() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      man:x:6:12:man:/var/cache/man:/usr/sbin/nologin\n\
                      postgres:x:101:104::/var/lib/postgresql:/bin/bash\n\
                      alice:x:1002:1002::/srv/alice:/bin/bash\n\
                      bob:x:1003:1003::/:/bin/sh\n\
                      carol:x:1004:1004::relative:/bin/sh\n\
                      erin:x:100000:100000::/srv/erin:/bin/sh\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
                      broken line\n";
        assert_eq!(
            people_homes(passwd),
            [
                (1002, PathBuf::from("/srv/alice")),
                (100000, PathBuf::from("/srv/erin"))
            ]
        );
    }

    /// Round 32 (high ×2, low): a home `/etc/passwd` names through a link (the link itself,
    /// or a linked folder above it) was shown, or stopped every command (bubblewrap cannot
    /// make a mount point through a link); one above uid 65535 was shown; the running
    /// account's own passwd home was shown when `$HOME` pointed elsewhere. Each is covered
    /// where it really lies now. Root only (the homes are given to other accounts).
    #[test]
    fn every_accounts_home_is_found_where_it_really_lies() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("not root: not checked");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let home = |name: &str, uid: u32| {
            let p = base.join(name);
            std::fs::create_dir_all(&p).unwrap();
            std::os::unix::fs::chown(&p, Some(uid), Some(uid)).unwrap();
            p
        };
        let alice = home("alice", 1001);
        let dave = home("real/dave", 1004);
        std::os::unix::fs::symlink(&dave, base.join("dave")).unwrap();
        let erin = home("erin", 100000);
        let ed = home("real/ed", 1005);
        std::os::unix::fs::symlink(base.join("real"), base.join("rl")).unwrap();
        let mine = home("mine", 1006);
        let not_theirs = home("mallory", 1007);
        let passwd = format!(
            "alice:x:1001:1001::{}:/bin/sh\ndave:x:1004:1004::{}:/bin/sh\n\
             erin:x:100000:100000::{}:/bin/sh\ned:x:1005:1005::{}:/bin/sh\n\
             me:x:1006:1006::{}:/bin/sh\nmallory:x:1008:1008::{}:/bin/sh\n",
            alice.display(),
            base.join("dave").display(),
            erin.display(),
            base.join("rl/ed").display(),
            mine.display(),
            not_theirs.display(),
        );
        let own = base.join("h2");
        let found = account_homes_in(&passwd, Some(&own));
        for shown in [&alice, &dave, &erin, &ed, &mine] {
            assert!(
                found.contains(shown),
                "{} not found: {found:?}",
                shown.display()
            );
        }
        assert!(
            !found.contains(&base.join("dave")),
            "a link is covered at its target"
        );
        assert!(
            !found.contains(&not_theirs),
            "a folder its account does not own"
        );
        // `$HOME` itself and the folders above it are never among them.
        let found = account_homes_in(&passwd, Some(&alice));
        assert!(!found.contains(&alice), "{found:?}");
        let found = account_homes_in(&passwd, Some(&dave.join("sub")));
        assert!(!found.contains(&dave), "{found:?}");
    }

    #[test]
    fn a_folder_bound_elsewhere_is_found_at_its_source_too() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (home, data) = (base.join("home/me"), base.join("data/home/me"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let b = base.display();
        // `/` of device 8:1, and the home bound at base/home/me from base/data/home/me.
        let table = format!(
            "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
             40 22 8:1 {b}/data/home/me {b}/home/me rw - ext4 /dev/sda1 rw\n\
             41 22 0:5 / /proc rw - proc proc rw\n"
        );
        assert_eq!(
            bind_aliases_in(&table, std::slice::from_ref(&home)),
            std::slice::from_ref(&data)
        );
        // And the other way: the source's alias is where it is bound.
        assert_eq!(
            bind_aliases_in(&table, std::slice::from_ref(&data)),
            std::slice::from_ref(&home)
        );
        // A folder on no other mount has none.
        assert!(bind_aliases_in(&table, &[base.join("data")]).is_empty());
        assert_eq!(unescape("/a\\040b"), PathBuf::from("/a b"));
    }
}
