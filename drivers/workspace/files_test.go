package workspace

import (
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// write creates a file under root with the given content and mode.
func write(t *testing.T, root, name, content string, mode fs.FileMode) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func readOrEmpty(t *testing.T, root, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// assertNoTempFiles fails if a temporary file of the driver was left behind.
func assertNoTempFiles(t *testing.T, root string) {
	t.Helper()
	filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(e.Name(), ".workspace-") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

func TestCreateFile(t *testing.T) {
	t.Parallel()
	binary := []byte{0, 1, 2, 0xff, 0xfe, '\n'}
	tests := []struct {
		name      string
		setup     func(t *testing.T, root string)
		args      string
		check     string // file checked afterwards; defaults to the path
		want      string // its content afterwards
		wantBytes int    // bytesWritten on success
		wantErr   string // "" for success
	}{
		{name: "new file", args: `{"path":"a.txt","content":"hello"}`, want: "hello", wantBytes: 5},
		{name: "parents created", args: `{"path":"x/y/z.txt","content":"deep"}`, want: "deep", wantBytes: 4},
		{name: "empty content", args: `{"path":"empty","content":""}`, want: "", wantBytes: 0},
		{name: "explicit utf-8", args: `{"path":"u","content":"héllo","encoding":"utf-8"}`, want: "héllo", wantBytes: 6},
		{
			name: "base64 binary",
			args: `{"path":"bin","content":"` + base64.StdEncoding.EncodeToString(binary) + `","encoding":"base64"}`,
			want: string(binary), wantBytes: len(binary),
		},
		{
			name:  "exists without overwrite",
			setup: func(t *testing.T, root string) { write(t, root, "a.txt", "old", 0o640) },
			args:  `{"path":"a.txt","content":"new"}`, want: "old", wantErr: "file already exists: a.txt",
		},
		{
			name:  "exists with overwrite false",
			setup: func(t *testing.T, root string) { write(t, root, "a.txt", "old", 0o640) },
			args:  `{"path":"a.txt","content":"new","overwrite":false}`, want: "old", wantErr: "already exists",
		},
		{
			name:  "overwrite replaces",
			setup: func(t *testing.T, root string) { write(t, root, "a.txt", "a much longer old content", 0o640) },
			args:  `{"path":"a.txt","content":"new","overwrite":true}`, want: "new", wantBytes: 3,
		},
		{name: "overwrite of a missing file creates it", args: `{"path":"n.txt","content":"n","overwrite":true}`, want: "n", wantBytes: 1},
		{
			name:  "overwrite refuses a directory",
			setup: func(t *testing.T, root string) { os.Mkdir(filepath.Join(root, "dir"), 0o750) },
			args:  `{"path":"dir","content":"x","overwrite":true}`, check: "dir/none", want: "<", wantErr: "dir is a directory",
		},
		{
			name:  "parent is a file",
			setup: func(t *testing.T, root string) { write(t, root, "f", "file", 0o640) },
			args:  `{"path":"f/x","content":"x"}`, check: "f", want: "file", wantErr: "create parent directories of f/x",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, root := newTestDriver(t)
			if tt.setup != nil {
				tt.setup(t, root)
			}
			a := decode(t, tt.args)
			res := run(t, d, "createFile", a)
			data := dataOf(t, res)
			if data["type"] != "createFile" || data["path"] != a["path"] {
				t.Errorf("data = %v, want type createFile and path %v", data, a["path"])
			}
			if tt.wantErr != "" {
				wantFailure(t, res, 1, "execution", tt.wantErr)
			} else {
				wantSuccess(t, res)
				if data["bytesWritten"] != tt.wantBytes {
					t.Errorf("bytesWritten = %v, want %d", data["bytesWritten"], tt.wantBytes)
				}
			}
			check := tt.check
			if check == "" {
				check = a["path"].(string)
			}
			if got := readOrEmpty(t, root, check); got != tt.want && !(tt.want == "<" && strings.HasPrefix(got, "<")) {
				t.Errorf("%s = %q, want %q", check, got, tt.want)
			}
			assertNoTempFiles(t, root)
		})
	}
}

func TestCreateFileModes(t *testing.T) {
	t.Parallel()
	d, root := newTestDriver(t)
	wantSuccess(t, run(t, d, "createFile", decode(t, `{"path":"new.txt","content":"x"}`)))
	if fi, err := os.Stat(filepath.Join(root, "new.txt")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("new file mode = %v (%v), want 0640", fi.Mode().Perm(), err)
	}
	write(t, root, "run.sh", "echo old", 0o750)
	wantSuccess(t, run(t, d, "createFile", decode(t, `{"path":"run.sh","content":"echo new","overwrite":true}`)))
	if fi, err := os.Stat(filepath.Join(root, "run.sh")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("replaced file mode = %v (%v), want the original 0750", fi.Mode().Perm(), err)
	}
}

func TestReadFile(t *testing.T) {
	t.Parallel()
	binary := []byte{0xff, 0x00, 'a', 0xc3}
	tests := []struct {
		name     string
		setup    func(t *testing.T, root string)
		args     string
		want     string // Stdout on success
		wantSize int
		wantErr  string
	}{
		{
			name:  "utf-8 by default",
			setup: func(t *testing.T, root string) { write(t, root, "a.txt", "héllo\n", 0o640) },
			args:  `{"path":"a.txt"}`, want: "héllo\n", wantSize: 7,
		},
		{
			name:  "base64",
			setup: func(t *testing.T, root string) { write(t, root, "bin", string(binary), 0o640) },
			args:  `{"path":"bin","encoding":"base64"}`, want: base64.StdEncoding.EncodeToString(binary), wantSize: 4,
		},
		{
			name:  "empty file",
			setup: func(t *testing.T, root string) { write(t, root, "e", "", 0o640) },
			args:  `{"path":"e"}`, want: "", wantSize: 0,
		},
		{
			name:  "binary as utf-8 is refused",
			setup: func(t *testing.T, root string) { write(t, root, "bin", string(binary), 0o640) },
			args:  `{"path":"bin","encoding":"utf-8"}`, wantErr: `not valid UTF-8; read it with encoding "base64"`,
		},
		{name: "missing file", args: `{"path":"nope.txt"}`, wantErr: "file not found: nope.txt"},
		{
			name:  "directory",
			setup: func(t *testing.T, root string) { os.Mkdir(filepath.Join(root, "dir"), 0o750) },
			args:  `{"path":"dir"}`, wantErr: "dir is a directory",
		},
		{
			name: "named pipe is refused without blocking",
			setup: func(t *testing.T, root string) {
				if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			args: `{"path":"fifo"}`, wantErr: "fifo is not a regular file",
		},
		{
			name: "symbolic link inside the workspace is not followed",
			setup: func(t *testing.T, root string) {
				write(t, root, "target.txt", "via link", 0o640)
				os.Symlink("target.txt", filepath.Join(root, "link"))
			},
			args: `{"path":"link"}`, wantErr: "link is a symbolic link; file operations do not follow links",
		},
		{
			name: "folder link inside the workspace is not traversed",
			setup: func(t *testing.T, root string) {
				write(t, root, "real/target.txt", "via link", 0o640)
				os.Symlink("real", filepath.Join(root, "inside"))
			},
			args: `{"path":"inside/target.txt"}`, wantErr: "inside is a symbolic link; file operations do not follow links",
		},
		{
			name:  "exactly 10 MiB",
			setup: func(t *testing.T, root string) { write(t, root, "max", strings.Repeat("z", 10<<20), 0o640) },
			args:  `{"path":"max"}`, want: strings.Repeat("z", 10<<20), wantSize: 10 << 20,
		},
		{
			name:  "over 10 MiB",
			setup: func(t *testing.T, root string) { write(t, root, "big", strings.Repeat("z", 10<<20+1), 0o640) },
			args:  `{"path":"big"}`, wantErr: "more than the 10485760 bytes",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, root := newTestDriver(t)
			if tt.setup != nil {
				tt.setup(t, root)
			}
			res := run(t, d, "readFile", decode(t, tt.args))
			data := dataOf(t, res)
			if _, ok := data["content"]; ok {
				t.Error("content is duplicated in Data")
			}
			if tt.wantErr != "" {
				wantFailure(t, res, 1, "execution", tt.wantErr)
				if res.Stdout != "" {
					t.Errorf("failed read has Stdout %q", res.Stdout)
				}
				return
			}
			wantSuccess(t, res)
			if res.Stdout != tt.want {
				t.Errorf("Stdout = %.40q, want %.40q", res.Stdout, tt.want)
			}
			if data["size"] != tt.wantSize {
				t.Errorf("size = %v, want %d", data["size"], tt.wantSize)
			}
			wantEnc := "utf-8"
			if strings.Contains(tt.args, "base64") {
				wantEnc = "base64"
			}
			if data["encoding"] != wantEnc {
				t.Errorf("encoding = %v, want %s", data["encoding"], wantEnc)
			}
		})
	}
}

func TestEditFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		initial     string // content of f.txt; "" means no file
		edits       string
		want        string // f.txt afterwards
		wantApplied int
		wantErr     string
	}{
		{
			name: "single edit", initial: "console.log(trips);\n",
			edits: `[{"oldContent":"console.log(trips);","newContent":"console.log(JSON.stringify(trips));"}]`,
			want:  "console.log(JSON.stringify(trips));\n", wantApplied: 1,
		},
		{
			name: "edits see the result of the previous edit", initial: "a",
			edits: `[{"oldContent":"a","newContent":"b"},{"oldContent":"b","newContent":"c"}]`,
			want:  "c", wantApplied: 2,
		},
		{
			name: "only the first occurrence is replaced", initial: "x x x",
			edits: `[{"oldContent":"x","newContent":"y"}]`,
			want:  "y x x", wantApplied: 1,
		},
		{
			name: "deletion by empty newContent", initial: "keep-drop-keep",
			edits: `[{"oldContent":"drop-","newContent":""}]`,
			want:  "keep-keep", wantApplied: 1,
		},
		{
			name: "failing second edit writes nothing", initial: "alpha beta",
			edits:   `[{"oldContent":"alpha","newContent":"ALPHA"},{"oldContent":"gamma","newContent":"GAMMA"}]`,
			want:    "alpha beta",
			wantErr: "edits[1]: oldContent not found in f.txt",
		},
		{
			name: "text removed by an earlier edit is not found", initial: "one two",
			edits:   `[{"oldContent":"one ","newContent":""},{"oldContent":"one","newContent":"1"}]`,
			want:    "one two",
			wantErr: "edits[1]",
		},
		{
			name: "missing file", edits: `[{"oldContent":"a","newContent":"b"}]`,
			want: "<", wantErr: "file not found: f.txt",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, root := newTestDriver(t)
			if tt.initial != "" {
				write(t, root, "f.txt", tt.initial, 0o640)
			}
			res := run(t, d, "editFile", decode(t, `{"path":"f.txt","edits":`+tt.edits+`}`))
			data := dataOf(t, res)
			if data["type"] != "editFile" || data["path"] != "f.txt" {
				t.Errorf("data = %v", data)
			}
			if tt.wantErr != "" {
				wantFailure(t, res, 1, "execution", tt.wantErr)
			} else {
				wantSuccess(t, res)
				if data["editsApplied"] != tt.wantApplied {
					t.Errorf("editsApplied = %v, want %d", data["editsApplied"], tt.wantApplied)
				}
			}
			got := readOrEmpty(t, root, "f.txt")
			if got != tt.want && !(tt.want == "<" && strings.HasPrefix(got, "<")) {
				t.Errorf("f.txt = %q, want %q", got, tt.want)
			}
			assertNoTempFiles(t, root)
		})
	}
}

func TestEditFileLimitsAndKinds(t *testing.T) {
	t.Parallel()
	d, root := newTestDriver(t)
	one := func(path, old, repl string) map[string]any {
		return map[string]any{"path": path, "edits": []any{map[string]any{"oldContent": old, "newContent": repl}}}
	}

	write(t, root, "run.sh", "echo old", 0o750)
	wantSuccess(t, run(t, d, "editFile", one("run.sh", "old", "new")))
	if fi, err := os.Stat(filepath.Join(root, "run.sh")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("edited script mode = %v (%v), want 0750 kept", fi.Mode().Perm(), err)
	}

	write(t, root, "grow", "x", 0o640)
	res := run(t, d, "editFile", one("grow", "x", strings.Repeat("y", 10<<20+1)))
	wantFailure(t, res, 2, "validation", "newContent must be at most")
	half := strings.Repeat("y", 6<<20)
	write(t, root, "grow", "xx", 0o640)
	res = run(t, d, "editFile", map[string]any{"path": "grow", "edits": []any{
		map[string]any{"oldContent": "x", "newContent": half},
		map[string]any{"oldContent": "x", "newContent": half},
	}})
	wantFailure(t, res, 1, "execution", "edits[1]: the edited file would exceed 10485760 bytes")
	if got := readOrEmpty(t, root, "grow"); got != "xx" {
		t.Errorf("grow = %.20q after a refused edit, want unchanged", got)
	}

	os.Mkdir(filepath.Join(root, "dir"), 0o750)
	wantFailure(t, run(t, d, "editFile", one("dir", "a", "b")), 1, "execution", "dir is a directory")
}

func TestDeleteFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		setup    func(t *testing.T, root string)
		path     string
		wantErr  string
		wantGone bool
	}{
		{
			name:  "file",
			setup: func(t *testing.T, root string) { write(t, root, "sub/a.txt", "x", 0o640) },
			path:  "sub/a.txt", wantGone: true,
		},
		{name: "missing file", path: "nope", wantErr: "file not found: nope", wantGone: true},
		{
			name:  "directory",
			setup: func(t *testing.T, root string) { os.Mkdir(filepath.Join(root, "dir"), 0o750) },
			path:  "dir", wantErr: "dir is a directory; deleteFile removes files only",
		},
		{
			name: "symbolic link inside the workspace",
			setup: func(t *testing.T, root string) {
				write(t, root, "target", "x", 0o640)
				os.Symlink("target", filepath.Join(root, "link"))
			},
			path: "link", wantErr: "link is a symbolic link",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, root := newTestDriver(t)
			if tt.setup != nil {
				tt.setup(t, root)
			}
			res := run(t, d, "deleteFile", map[string]any{"path": tt.path})
			if dataOf(t, res)["path"] != tt.path {
				t.Errorf("data path = %v", dataOf(t, res)["path"])
			}
			if tt.wantErr != "" {
				wantFailure(t, res, 1, "execution", tt.wantErr)
			} else {
				wantSuccess(t, res)
			}
			_, err := os.Lstat(filepath.Join(root, tt.path))
			if gone := os.IsNotExist(err); gone != tt.wantGone {
				t.Errorf("gone = %v, want %v", gone, tt.wantGone)
			}
		})
	}
}

// TestConfinement checks that no operation reaches outside the workspace,
// neither by a path nor through a symbolic link planted inside it.
func TestConfinement(t *testing.T) {
	t.Parallel()
	d, root := newTestDriver(t)
	outside := t.TempDir()
	write(t, outside, "secret.txt", "secret", 0o640)
	for link, target := range map[string]string{
		"link-file": filepath.Join(outside, "secret.txt"),
		"link-dir":  outside,
		"etc":       "/etc",
		"up":        "../",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	edit := `"edits":[{"oldContent":"secret","newContent":"pwned"}]`
	tests := []struct {
		name string
		op   string
		args string
	}{
		{"read parent path", "readFile", `{"path":"../x"}`},
		{"read absolute path", "readFile", `{"path":"/etc/passwd"}`},
		{"read nested escape", "readFile", `{"path":"a/../../x"}`},
		{"read file link", "readFile", `{"path":"link-file"}`},
		{"read through dir link", "readFile", `{"path":"link-dir/secret.txt"}`},
		{"read through /etc link", "readFile", `{"path":"etc/passwd"}`},
		{"read through relative link", "readFile", `{"path":"up/x"}`},
		{"create over file link", "createFile", `{"path":"link-file","content":"pwned"}`},
		{"overwrite file link", "createFile", `{"path":"link-file","content":"pwned","overwrite":true}`},
		{"create through dir link", "createFile", `{"path":"link-dir/new.txt","content":"pwned"}`},
		{"overwrite through dir link", "createFile", `{"path":"link-dir/secret.txt","content":"pwned","overwrite":true}`},
		{"create nested through dir link", "createFile", `{"path":"link-dir/sub/new.txt","content":"pwned"}`},
		{"create through /etc link", "createFile", `{"path":"etc/toolgate-test","content":"pwned"}`},
		{"create absolute", "createFile", `{"path":"/tmp/toolgate-test","content":"pwned"}`},
		{"edit file link", "editFile", `{"path":"link-file",` + edit + `}`},
		{"edit through dir link", "editFile", `{"path":"link-dir/secret.txt",` + edit + `}`},
		{"delete file link", "deleteFile", `{"path":"link-file"}`},
		{"delete through dir link", "deleteFile", `{"path":"link-dir/secret.txt"}`},
		{"delete parent path", "deleteFile", `{"path":"../secret.txt"}`},
		{"shell cwd through dir link", "shell", `{"command":"cat secret.txt","cwd":"link-dir"}`},
		{"shell cwd parent", "shell", `{"command":"pwd","cwd":"a/../.."}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, d, tt.op, decode(t, tt.args))
			if res.ExitCode == 0 {
				t.Fatalf("%s %s succeeded: stdout %q", tt.op, tt.args, res.Stdout)
			}
			if strings.Contains(res.Stdout, "secret") || strings.Contains(res.Stdout, "root:") {
				t.Errorf("outside content leaked: %q", res.Stdout)
			}
		})
	}
	if got := readOrEmpty(t, outside, "secret.txt"); got != "secret" {
		t.Errorf("outside file = %q, want untouched", got)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 {
		t.Errorf("outside folder has %d entries, want only secret.txt", len(entries))
	}
	if _, err := os.Lstat(filepath.Join(root, "link-file")); err != nil {
		t.Errorf("link-file was removed: %v", err)
	}
}
