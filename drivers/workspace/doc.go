// Package workspace is the built-in driver that runs file and shell
// operations in one folder on the gateway host, following the operations of
// the Agent Spaces code execution protocol: createFile, readFile, editFile,
// deleteFile and shell.
//
// # Isolation
//
// File operations are confined to the workspace folder: a path is relative
// and has no ".." element, and every folder on it is opened relative to its
// parent without following symbolic links (see Files), so nothing outside
// the workspace is reached.
//
// Shell commands run in a sandbox by default (Config.Sandbox
// SandboxNamespaces, Linux): the driver starts its own executable again as
// the init of fresh user, PID, mount, IPC and (unless Config.Network is
// NetworkHost) network namespaces; see [MaybeRunSandbox]. The init builds a
// root holding only the host's system folders (/bin /sbin /usr /lib* /etc)
// read-only, the workspace read-write at its own path, a fresh /proc, a
// tmpfs /tmp and a /dev with null, zero, full, random and urandom; paths in
// Config.Hide that would still be visible are masked. The command then runs
// with no capabilities, no_new_privs, Landlock where the kernel has it
// (read-only system folders, read-write workspace and /tmp) and rlimits on
// address space, file size and CPU time; a pids cgroup caps its tasks where
// the gateway may create one. When the shell exits, times out or the call
// ends, the init dies and the kernel kills every process left in its PID
// namespace, whatever session or process group it moved to; the kernel
// also kills the init when the gateway dies. A sandbox that cannot be set up
// fails the call without running the command.
//
// With SandboxNone the command runs as the gateway's own user in its own
// process group, killed as a whole when the call ends; nothing stops it from
// reading or writing any file that user can reach, and a process that leaves
// the group (setsid) outlives the call.
//
// # Arguments
//
// Arguments are checked strictly against the protocol's validation rules, and
// an argument name the operation does not know is rejected so that typos
// surface instead of being ignored:
//
//   - createFile: path, content, encoding ("utf-8" or "base64"), overwrite
//   - readFile: path, encoding
//   - editFile: path, edits (a list of {oldContent, newContent})
//   - deleteFile: path
//   - shell: command, cwd, timeout (milliseconds), env
//
// # Canonical paths
//
// Policy sees exactly what runs. The driver implements [drivers.Normalizer]:
// the gateway canonicalises a file operation's path and the shell's cwd
// before the call is hashed, recorded or decided, and Cedar's context,
// request.json and the driver all get that one spelling. The canonical form
// of a path is
//
//   - relative (no leading '/'), with segments separated by a single '/';
//   - without "." or empty segments: "./a", "a//b", "a/./b" are "a/b";
//   - in Unicode NFC: "cafe\u0301" is "caf\u00e9";
//   - at most 255 characters (the spelling before cleaning at most 1020 bytes).
//
// A path with no canonical form is refused (the gateway answers
// INVALID_ARGUMENT before claiming the request id): an empty path, a ".."
// segment (it cannot be resolved without knowing which folders are links),
// a NUL byte, invalid UTF-8, a control character (C0, DEL, C1), a format
// character (bidi overrides and isolates, zero-width spaces and joiners, the
// byte order mark, the soft hyphen: Unicode category Cf) or a line or
// paragraph separator, since each would let one file have a spelling a rule
// author cannot see. For a file operation, a spelling that names a folder
// ("a/", "a/.", ".") is refused rather than turned into a file name; a cwd
// is cleaned ("sub/." is "sub", "./" is "." for the workspace root).
// Run itself refuses a path that is not canonical, so a Go caller that
// bypasses the gateway gets a refusal, never a second interpretation.
// Names on disk that are not NFC cannot be reached by file operations.
//
// Beyond paths: file content is at most 10 MiB, a
// command at most 4096 characters, a timeout between 1000 and 3600000 ms, and
// an environment variable name matches ^[A-Za-z_][A-Za-z0-9_]*$.
//
// # Results
//
// Every operation answers with a [drivers.Result]; a failed operation is a
// Result with a non-zero exit code, never a Go error. Exit code 2 means the
// arguments were invalid, 1 that the operation failed (file missing, already
// present, edit not found, …) and the shell reports the command's own exit
// code, 128+N for a command killed by signal N, and 124 for a timeout. The
// message of a failure is in Stderr. Data is a map holding the fields of the
// protocol's event for the operation ("type", "path" or "command",
// "success", …) and, on failure, "error" and "category" ("validation",
// "execution" or "timeout"). readFile returns the content in Stdout and the
// shell its output in Stdout and Stderr; neither is repeated in Data.
//
// # Files
//
// Writes go to a temporary file in the target's directory that is then
// renamed (or, for a create without overwrite, hard-linked) into place, so a
// reader sees either the old or the new content, never a torn file. Writes
// made through one Driver are serialized, which makes an editFile's
// read-modify-write atomic with respect to the other file operations of the
// same Driver (not with respect to shell commands). Replacing a file keeps its
// permission bits.
//
// File operations never traverse a symbolic link, wherever it points: every
// folder on the path is opened relative to its parent with O_NOFOLLOW, and
// the operation acts on the last element through the folder it holds open,
// with a link in last place refused too (deleteFile removes no link, and
// createFile replaces none). A path that goes through a link fails with
// "<prefix> is a symbolic link; file operations do not follow links", and a
// link swapped in after the policy decision makes the call fail rather than
// redirect it, so the file acted on is always the one policy saw. The
// shell's cwd is checked the same way before the command starts (the
// command itself may then follow any link it likes).
//
// Because writes are serialized, no single call may hold them up for long.
// An editFile carries at most 1000 edits, and the edits times the file's
// size may not exceed 256 MiB (each edit searches and rebuilds the file as
// the previous ones left it; the work is counted again as the edits apply,
// so edits that grow the file gain nothing): 25 edits on a 10 MiB file,
// 256 on a 1 MiB one. Beyond that the call is refused as invalid (exit 2)
// before it waits for the other writes. An editFile ends at its caller's
// deadline or after 10 s, whichever comes first, waiting included, with a
// timeout (exit 124) and nothing written; createFile and deleteFile give up
// waiting at their caller's deadline the same way.
//
// # Shell
//
// A command runs as Config.Shell -c COMMAND with stdin connected to the null
// device and this environment, plus the caller's env (which may override
// it); nothing of the gateway's own environment is passed on:
//
//	PATH=/usr/local/bin:/usr/bin:/bin
//	HOME=<workspace>
//	LANG=C.UTF-8
//	TMPDIR=<workspace>/.tmp
//
// TMPDIR lives inside the workspace so that temporary files stay with the
// rest of the call's work instead of accumulating in the host's /tmp; the
// driver creates it when missing. Each of stdout and stderr keeps at most
// Config.OutputLimit bytes; the rest is counted and dropped, and a line
// "[output truncated: N bytes omitted]" is appended to the stream. Output is
// made valid UTF-8 by replacing invalid bytes with U+FFFD.
//
// When the command exits, times out or the call's context ends, its sandbox
// (or, without one, its process group) is killed with SIGKILL, so background
// processes started by the command never outlive the call. A cut at the
// output cap never leaves a partial token: a run of token characters ([A-Za-z0-9+/=_.:%~-]) that the cap splits is dropped
// with the rest, up to 256 bytes back.
package workspace
