//! Embeds the Lua scripts of `lua/` and the saved playground operations of
//! `playground/operations/` into the binary, and names the commit it is built from
//! (`ENGAGE_COMMIT`, for `engage_build_info`).
//!
//! Adding a script or an example operation means adding a file: this build step finds it,
//! and the generated tables (`lua_scripts.rs`, `playground_operations.rs`) list it, so no
//! central registry has to be edited by hand.
//!
//! A script's header declares its input, one line per key and per argument in order, each
//! with the name of its field: `KEYS[1] info: …`, `ARGV[3] now_ms: …`, and `KEYS[a..] name:`
//! or `ARGV[a..] name:` for a group that ends the call (`Input: as other.lua` takes another
//! script's). The build writes two structs per script, named after it: its keys
//! (`RemarksLike { info, relation, likers, events }`, each a `String`, a group a
//! `Vec<String>`) and its arguments (`RemarksLikeArgs { voter, remark, now_ms, … }`, each of
//! any type Redis takes as one argument, a group of any that makes a list, such as a `Vec`
//! of tuples), with the impls that put them into a call in the header's order
//! (`src/infra/redis/scripts.rs` runs it). A caller therefore names what it passes, and a key
//! or an argument added to a header is a field its struct literal lacks: it does not compile
//! until it passes it. The build also refuses a script whose code reads a key or an argument
//! its header does not declare. BullMQ puts the key count in the file name for a like
//! reason; here each key's name stays next to its description.

use std::{env, fs, path::Path};

fn main() {
    let out_dir = env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let root = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");

    let lua_dir = Path::new(&root).join("lua");
    let scripts = files_with_extension(&lua_dir, "lua");
    let expanded_dir = Path::new(&out_dir).join("lua");
    fs::create_dir_all(&expanded_dir).expect("create OUT_DIR/lua");
    let mut generated = String::new();
    let inputs: Vec<(String, Input)> = scripts
        .iter()
        .map(|(stem, path)| (stem.clone(), input(stem, path)))
        .collect();
    for (stem, path) in &scripts {
        let input = &inputs
            .iter()
            .find(|(s, _)| s == stem)
            .expect("read above")
            .1;
        let expanded = expand_includes(&lua_dir, path);
        let expanded_path = expanded_dir.join(format!("{stem}.lua"));
        fs::write(&expanded_path, expanded).expect("write expanded script");
        generated.push_str(&format!(
            "/// `lua/{stem}.lua`.\npub static {}: LazyLock<LuaScript> =\n    LazyLock::new(|| LuaScript::new({stem:?}, include_str!({:?})));\n",
            stem.to_uppercase(),
            expanded_path.to_string_lossy()
        ));
        let shared = match input {
            Input::Own(declared) => declared,
            Input::As(other) => match inputs.iter().find(|(s, _)| s == other) {
                Some((_, Input::Own(declared))) => declared,
                _ => panic!("lua/{stem}.lua takes the input of lua/{other}.lua, which declares none of its own"),
            },
        };
        check_code(stem, path, shared);
        generated.push_str(&script_types(stem, input, shared));
    }
    generated.push_str("/// Every script of `lua/`, loaded into Redis at start.\npub fn all() -> Vec<&'static LuaScript> {\n    vec![");
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

/// One key or argument a header declares: `KEYS[2] relation: the like relation …` is named
/// `relation`, and what follows the colon documents its field.
struct Entry {
    name: String,
    about: String,
}

/// What a script's header declares: its keys and its arguments in order, and the group of
/// keys or of arguments that may end the call (`KEYS[5..] markers: …`, `ARGV[3..] …`).
struct Declared {
    keys: Vec<Entry>,
    key_group: Option<Entry>,
    args: Vec<Entry>,
    arg_group: Option<Entry>,
}

/// A script's input: declared in its own header, or `Input: as other.lua`, the keys and
/// arguments of another script (an unlike takes what a like takes).
enum Input {
    Own(Declared),
    As(String),
}

/// The comment that opens a script, and the code after it.
fn header_and_code(path: &str) -> (String, String) {
    let source = fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let header = match source.strip_prefix("--[[") {
        Some(rest) => rest.split("]]").next().unwrap_or_default().to_string(),
        None => source
            .lines()
            .take_while(|line| line.starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n"),
    };
    let code = source[source.find(&header).map_or(0, |at| at + header.len())..].to_string();
    (header, code)
}

/// Reads the header's input: one line per key and per argument, `KEYS[n] name: …` or
/// `ARGV[n] name: …` in order from 1, and `KEYS[a..] name: …` or `ARGV[a..] name: …` for a
/// group that ends the call.
fn input(stem: &str, path: &str) -> Input {
    let (header, _) = header_and_code(path);
    let mut declared = Declared {
        keys: Vec::new(),
        key_group: None,
        args: Vec::new(),
        arg_group: None,
    };
    for line in header.lines() {
        let line = line.trim().trim_start_matches("--").trim();
        if let Some(other) = line
            .strip_prefix("Input: as ")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|file| file.strip_suffix(".lua"))
        {
            return Input::As(other.to_string());
        }
        let (kind, rest) = if let Some(rest) = line.strip_prefix("KEYS[") {
            ("KEYS", rest)
        } else if let Some(rest) = line.strip_prefix("ARGV[") {
            ("ARGV", rest)
        } else {
            continue;
        };
        let (index, rest) = rest
            .split_once(']')
            .unwrap_or_else(|| panic!("lua/{stem}.lua: `{line}` lacks its `]`"));
        let (name, about) = rest.trim().split_once(':').unwrap_or_else(|| {
            panic!("lua/{stem}.lua: `{line}` names no field (`{kind}[{index}] name: what it is`)")
        });
        // `KEYS[1..6] a, b, c, d, e, f: as other.lua` names a run of keys described elsewhere.
        let (first, names) = match index.split_once("..") {
            Some((from, to)) if !to.is_empty() => {
                let names: Vec<&str> = name.split(',').map(str::trim).collect();
                let (from, to) = (from.trim().parse::<usize>(), to.trim().parse::<usize>());
                assert!(
                    matches!((&from, &to), (Ok(from), Ok(to)) if to + 1 == from + names.len()),
                    "lua/{stem}.lua: {kind}[{index}] names {} fields",
                    names.len()
                );
                (from.map(|from| from.to_string()).unwrap_or_default(), names)
            }
            _ => (index.trim().to_string(), vec![name.trim()]),
        };
        for (offset, name) in names.into_iter().enumerate() {
            // `a..` (a group) or no number at all (which `declare` refuses) stays as written.
            let index = first
                .parse::<usize>()
                .map_or_else(|_| first.clone(), |first| (first + offset).to_string());
            declare(stem, kind, &index, name, about, &mut declared);
        }
    }
    assert!(
        !declared.keys.is_empty(),
        "lua/{stem}.lua: its header declares no KEYS[n]; every key comes in through KEYS"
    );
    Input::Own(declared)
}

/// Adds `name`, `kind[index]` of the header, to what the script declares.
fn declare(stem: &str, kind: &str, index: &str, name: &str, about: &str, declared: &mut Declared) {
    assert!(
        !name.is_empty()
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !KEYWORDS.contains(&name),
        "lua/{stem}.lua: `{name}` of {kind}[{index}] is no field name (snake_case, no keyword)"
    );
    let entry = Entry {
        name: name.to_string(),
        about: about.trim().to_string(),
    };
    let (fixed, group) = match kind {
        "KEYS" => (&mut declared.keys, &mut declared.key_group),
        _ => (&mut declared.args, &mut declared.arg_group),
    };
    assert!(
        group.is_none(),
        "lua/{stem}.lua: {kind}[{index}] follows the group that ends the call"
    );
    assert!(
        fixed.iter().all(|seen| seen.name != entry.name),
        "lua/{stem}.lua: two {kind} named `{name}`"
    );
    match index.strip_suffix("..") {
        Some(from) => {
            assert_eq!(
                from.trim().parse::<usize>().ok(),
                Some(fixed.len() + 1),
                "lua/{stem}.lua: the group {kind}[{index}] does not follow the last fixed one"
            );
            *group = Some(entry);
        }
        None => {
            assert_eq!(
                index.trim().parse::<usize>().ok(),
                Some(fixed.len() + 1),
                "lua/{stem}.lua: {kind}[{index}] is not the next one (declare each in order, from 1)"
            );
            fixed.push(entry);
        }
    }
}

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "break", "const", "continue", "crate", "dyn", "else", "enum",
    "extern", "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move",
    "mut", "pub", "ref", "return", "self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while",
];

/// Refuses a script whose header or code names a key or a fixed argument beyond those its
/// input declares (`ARGV[i + 1]` names none: groups are read so).
fn check_code(stem: &str, path: &str, declared: &Declared) {
    let (header, code) = header_and_code(path);
    for (name, count) in [("KEYS", declared.keys.len()), ("ARGV", declared.args.len())] {
        let used = highest(name, &code).fixed;
        assert!(
            used <= count,
            "lua/{stem}.lua reads {name}[{used}] but its input declares {count}"
        );
        let named = highest(name, &header).fixed;
        assert!(
            named <= count,
            "lua/{stem}.lua: its header names {name}[{named}] but declares {count} (one per line: `{name}[n] name: …`)"
        );
    }
}

/// `remarks_like` → `RemarksLike`.
fn camel(stem: &str) -> String {
    stem.split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// The types of one script: its keys (`RemarksLike`, a field per key, each a `String`, and a
/// `Vec<String>` for a group of keys) and its arguments (`RemarksLikeArgs`, a field per
/// argument, each of any type Redis takes as one argument, and one for the group that ends
/// the call, such as a `Vec` of tuples), with the impls that put them into a call in the
/// header's order.
fn script_types(stem: &str, input: &Input, declared: &Declared) -> String {
    let name = camel(stem);
    let upper = stem.to_uppercase();
    let doc = |about: &str| format!("    #[doc = {about:?}]\n");
    let mut out = String::new();
    let (args_type, params) = match input {
        Input::As(other) => (format!("{}Args", camel(other)), arg_params(declared)),
        Input::Own(_) => (format!("{name}Args"), arg_params(declared)),
    };
    let generics = if params.is_empty() {
        String::new()
    } else {
        format!("<{}>", params.join(", "))
    };
    let bounds = if params.is_empty() {
        String::new()
    } else {
        format!(
            "<{}>",
            params
                .iter()
                .map(|p| format!("{p}: redis::ToRedisArgs"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    match input {
        Input::As(other) => {
            let other = camel(other);
            out.push_str(&format!(
                "/// The keys of `lua/{stem}.lua`: those of [`{other}`], and it takes [`{other}Args`].\npub struct {name}(pub {other});\n\n\
                 impl Script for {name} {{\n    fn lua() -> &'static LuaScript {{\n        &{upper}\n    }}\n\n    \
                 fn key_count(&self) -> usize {{\n        self.0.key_count()\n    }}\n\n    \
                 fn add_keys(&self, call: &mut Cmd) {{\n        self.0.add_keys(call);\n    }}\n\n    \
                 fn slot_key(&self) -> &str {{\n        self.0.slot_key()\n    }}\n}}\n\n\
                 impl{bounds} ScriptArgs<{name}> for {args_type}{generics} {{\n    fn add_to(&self, call: &mut Cmd) {{\n        \
                 ScriptArgs::<{other}>::add_to(self, call);\n    }}\n}}\n\n"
            ));
        }
        Input::Own(_) => {
            out.push_str(&format!("/// The keys of `lua/{stem}.lua`, as its header names them.\npub struct {name} {{\n"));
            for key in &declared.keys {
                out.push_str(&doc(&key.about));
                out.push_str(&format!("    pub {}: String,\n", key.name));
            }
            if let Some(group) = &declared.key_group {
                out.push_str(&doc(&group.about));
                out.push_str(&format!("    pub {}: Vec<String>,\n", group.name));
            }
            out.push_str("}\n\n");
            out.push_str(&format!(
                "impl Script for {name} {{\n    fn lua() -> &'static LuaScript {{\n        &{upper}\n    }}\n\n    \
                 fn key_count(&self) -> usize {{\n        {}{}\n    }}\n\n    \
                 fn add_keys(&self, call: &mut Cmd) {{\n",
                declared.keys.len(),
                match &declared.key_group {
                    Some(group) => format!(" + self.{}.len()", group.name),
                    None => String::new(),
                }
            ));
            for key in &declared.keys {
                out.push_str(&format!("        call.arg(&self.{});\n", key.name));
            }
            if let Some(group) = &declared.key_group {
                out.push_str(&format!("        call.arg(&self.{});\n", group.name));
            }
            out.push_str(&format!(
                "    }}\n\n    fn slot_key(&self) -> &str {{\n        &self.{}\n    }}\n}}\n\n",
                declared.keys[0].name
            ));
            out.push_str(&format!(
                "/// The arguments of `lua/{stem}.lua`, as its header names them.\npub struct {args_type}{generics} {{\n"
            ));
            let entries = declared.args.iter().chain(&declared.arg_group);
            for (entry, param) in entries.clone().zip(&params) {
                out.push_str(&doc(&entry.about));
                out.push_str(&format!("    pub {}: {param},\n", entry.name));
            }
            out.push_str("}\n\n");
            out.push_str(&format!(
                "impl{bounds} ScriptArgs<{name}> for {args_type}{generics} {{\n    fn add_to(&self, {}call: &mut Cmd) {{\n",
                if params.is_empty() { "_" } else { "" }
            ));
            for entry in entries {
                out.push_str(&format!("        call.arg(&self.{});\n", entry.name));
            }
            out.push_str("    }\n}\n\n");
        }
    }
    out
}

/// A type parameter per argument (and one for the group): `A1`, `A2`, …
fn arg_params(declared: &Declared) -> Vec<String> {
    let count = declared.args.len() + usize::from(declared.arg_group.is_some());
    (1..=count).map(|i| format!("A{i}")).collect()
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
