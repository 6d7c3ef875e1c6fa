//! Embeds the Lua scripts of `lua/` and the saved playground operations of
//! `playground/operations/` into the binary, and names the commit it is built from
//! (`ENGAGE_COMMIT`, for `engage_build_info`).
//!
//! Adding a script or an example operation means adding a file: this build step finds it,
//! and the generated tables (`lua_scripts.rs`, `playground_operations.rs`) list it, so no
//! central registry has to be edited by hand.
//!
//! A script's header declares its keys (`KEYS[1] …`, `KEYS[1..6]`) and its arguments
//! (`ARGV[1] …`, `ARGV[1..7]`, and `ARGV[3..]` for a list of groups that ends the call). The
//! build reads both counts, refuses a script whose code reads a key or an argument its header
//! does not declare, and writes them into the script's type (`LuaScript<3, 5, false>`,
//! or `LuaScript<3, 2, true>` when groups follow): a Rust caller that passes another number of
//! keys or of arguments does not compile. BullMQ puts the key count in the file name for the
//! same reason; here it stays next to the description of each key.

use std::{env, fs, path::Path};

fn main() {
    let out_dir = env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let root = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");

    let lua_dir = Path::new(&root).join("lua");
    let scripts = files_with_extension(&lua_dir, "lua");
    let expanded_dir = Path::new(&out_dir).join("lua");
    fs::create_dir_all(&expanded_dir).expect("create OUT_DIR/lua");
    let mut generated = String::new();
    for (stem, source) in &scripts {
        let Declared { keys, args, more } = declared(stem, source);
        let expanded = expand_includes(&lua_dir, source);
        let path = expanded_dir.join(format!("{stem}.lua"));
        fs::write(&path, expanded).expect("write expanded script");
        let path = path.to_string_lossy();
        generated.push_str(&format!(
            "/// `lua/{stem}.lua`, {keys} keys, {args} arguments{}\npub static {}: LazyLock<LuaScript<{keys}, {args}, {more}>> =\n    LazyLock::new(|| LuaScript::new({stem:?}, include_str!({path:?})));\n",
            if more { " and groups" } else { "" },
            stem.to_uppercase()
        ));
    }
    generated.push_str("/// Every script of `lua/`, loaded into Redis at start.\npub fn all() -> Vec<&'static dyn Loadable> {\n    vec![");
    for (stem, _) in &scripts {
        generated.push_str(&format!("&*{}, ", stem.to_uppercase()));
    }
    generated.push_str("]\n}\n");
    fs::write(Path::new(&out_dir).join("lua_scripts.rs"), generated).expect("write lua_scripts.rs");

    let operations =
        files_with_extension(&Path::new(&root).join("playground/operations"), "graphql");
    let mut generated = String::from("pub static OPERATIONS: &[(&str, &str)] = &[\n");
    for (stem, path) in &operations {
        generated.push_str(&format!("    ({stem:?}, include_str!({path:?})),\n"));
    }
    generated.push_str("];\n");
    fs::write(
        Path::new(&out_dir).join("playground_operations.rs"),
        generated,
    )
    .expect("write playground_operations.rs");

    write_migrations(Path::new(&root), Path::new(&out_dir));
    name_commit(Path::new(&root));

    println!("cargo:rerun-if-changed=lua");
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=playground");
}

/// Sets `ENGAGE_COMMIT` to the short hash of the checked-out commit, or `unknown` where
/// there is no repository (the Docker build copies the sources without `.git`) or no git.
/// The build runs again when HEAD moves: `.git/HEAD` changes on a checkout, and the branch
/// it points to on a commit.
fn name_commit(root: &Path) {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|output| output.status.success())
            .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
            .filter(|text| !text.is_empty())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ENGAGE_COMMIT={commit}");
    // In a worktree `.git` is a file: git says where HEAD and the branch's ref are (a ref
    // may live in `packed-refs` instead of a file of its own).
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    for path in ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref()) {
        if let Some(file) = git(&["rev-parse", "--git-path", path]) {
            let file = root.join(file);
            if file.exists() {
                println!("cargo:rerun-if-changed={}", file.display());
            }
        }
    }
}

/// The migrations of both backends from one source: `migrations/NNNN_name.sql` serves
/// both, and `migrations/sqlite/NNNN_name.sql` or `migrations/postgres/NNNN_name.sql`
/// replaces it for one dialect where the SQL must differ. Writes `migrations.rs`: one
/// `(version, description, SQLite SQL, PostgreSQL SQL)` per migration, in order.
///
/// The description is the file name's, as `sqlx::migrate!` made it (`users items`), and the
/// SQL is the file's text unchanged, so databases migrated before keep their checksums.
fn write_migrations(root: &Path, out_dir: &Path) {
    let dir = root.join("migrations");
    let shared = files_with_extension(&dir, "sql");
    let sqlite = files_with_extension(&dir.join("sqlite"), "sql");
    let postgres = files_with_extension(&dir.join("postgres"), "sql");
    let mut names: Vec<&String> = shared
        .iter()
        .chain(&sqlite)
        .chain(&postgres)
        .map(|(stem, _)| stem)
        .collect();
    names.sort();
    names.dedup();
    let path_of = |files: &[(String, String)], name: &str| {
        files
            .iter()
            .find(|(stem, _)| stem == name)
            .map(|(_, path)| path.clone())
    };
    let mut generated = String::from(
        "/// `(version, description, SQLite SQL, PostgreSQL SQL)`, in order.\n\
         pub static MIGRATIONS: &[(i64, &str, &str, &str)] = &[\n",
    );
    let mut last_version = 0;
    for name in names {
        let (version, description) = name
            .split_once('_')
            .unwrap_or_else(|| panic!("migrations/{name}.sql: not NNNN_description"));
        let version: i64 = version
            .parse()
            .unwrap_or_else(|_| panic!("migrations/{name}.sql: {version} is not a version"));
        assert!(
            version > last_version,
            "migrations/{name}.sql: version {version} twice"
        );
        last_version = version;
        let common = path_of(&shared, name);
        let for_sqlite = path_of(&sqlite, name)
            .or(common.clone())
            .unwrap_or_else(|| {
                panic!("migrations/{name}.sql: none for SQLite (shared or sqlite/)")
            });
        let for_postgres = path_of(&postgres, name).or(common).unwrap_or_else(|| {
            panic!("migrations/{name}.sql: none for PostgreSQL (shared or postgres/)")
        });
        generated.push_str(&format!(
            "    ({version}, {:?}, include_str!({for_sqlite:?}), include_str!({for_postgres:?})),\n",
            description.replace('_', " ")
        ));
    }
    generated.push_str("];\n");
    fs::write(out_dir.join("migrations.rs"), generated).expect("write migrations.rs");
}

/// What a script's header declares: its keys, its fixed arguments, and whether groups of
/// keys or arguments follow them.
struct Declared {
    keys: usize,
    args: usize,
    more: bool,
}

/// Reads the header (the comment that opens the script): the highest `KEYS[n]` (or
/// `KEYS[a..n]`), the highest `ARGV[n]` (or `ARGV[a..n]`), and `KEYS[a..]` or `ARGV[a..]`
/// for groups from `a` on. Panics when the code reads a key or a fixed argument beyond those.
fn declared(stem: &str, path: &str) -> Declared {
    let source = fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let header = match source.strip_prefix("--[[") {
        Some(rest) => rest.split("]]").next().unwrap_or_default().to_string(),
        None => source
            .lines()
            .take_while(|line| line.starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n"),
    };
    let code = &source[source.find(&header).map_or(0, |at| at + header.len())..];
    let Highest {
        fixed: keys,
        open: more_keys,
    } = highest("KEYS", &header);
    assert!(
        keys > 0,
        "lua/{stem}.lua: its header declares no KEYS[n]; every key comes in through KEYS"
    );
    let used = highest("KEYS", code).fixed;
    assert!(
        used <= keys,
        "lua/{stem}.lua reads KEYS[{used}] but its header declares {keys} keys"
    );
    let Highest { fixed: args, open } = highest("ARGV", &header);
    let more = open.is_some() || more_keys.is_some();
    let args = open.map_or(args, |from| from - 1);
    let used = highest("ARGV", code).fixed;
    assert!(
        used <= args,
        "lua/{stem}.lua reads ARGV[{used}] but its header declares {args} fixed arguments"
    );
    Declared { keys, args, more }
}

struct Highest {
    /// The highest index named as `NAME[n]` or `NAME[a..n]` (0: none).
    fixed: usize,
    /// `a` of a `NAME[a..]`, open to the end.
    open: Option<usize>,
}

/// The indices of `name` (KEYS or ARGV) that `text` names with a number; `ARGV[i + 1]` names
/// none.
fn highest(name: &str, text: &str) -> Highest {
    let mut highest = Highest {
        fixed: 0,
        open: None,
    };
    let opening = format!("{name}[");
    for (at, _) in text.match_indices(&opening) {
        let rest = &text[at + opening.len()..];
        let Some(inside) = rest.find(']').map(|end| &rest[..end]) else {
            continue;
        };
        match inside.split_once("..") {
            Some((from, "")) => {
                if let Ok(from) = from.trim().parse::<usize>() {
                    highest.open = Some(from);
                }
            }
            Some((_, last)) => {
                if let Ok(last) = last.trim().parse::<usize>() {
                    highest.fixed = highest.fixed.max(last);
                }
            }
            None => {
                if let Ok(index) = inside.trim().parse::<usize>() {
                    highest.fixed = highest.fixed.max(index);
                }
            }
        }
    }
    highest
}

/// Replaces each line `-- @include name.lua` with the file `lua/include/name.lua`, so that
/// small helpers shared by scripts are written once (as BullMQ does). An included file may
/// include others; each file is included once per script, where it is first named.
fn expand_includes(lua_dir: &Path, script: &str) -> String {
    let source = fs::read_to_string(script).unwrap_or_else(|e| panic!("read {script}: {e}"));
    let mut included = Vec::new();
    expand(lua_dir, script, &source, &mut included)
}

fn expand(lua_dir: &Path, script: &str, source: &str, included: &mut Vec<String>) -> String {
    source
        .lines()
        .map(|line| match line.trim().strip_prefix("-- @include ") {
            Some(name) if included.iter().any(|seen| seen == name.trim()) => String::new(),
            Some(name) => {
                included.push(name.trim().to_string());
                let path = lua_dir.join("include").join(name.trim());
                let text = fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{script}: include {}: {e}", path.display()));
                expand(lua_dir, script, &text, included)
            }
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `(file stem, absolute path)` of every file in `dir` with `extension`, sorted by name so
/// that the generated code is stable.
fn files_with_extension(dir: &Path, extension: &str) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == extension))
                .map(|path| {
                    let stem = path
                        .file_stem()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned();
                    (stem, path.to_string_lossy().into_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}
