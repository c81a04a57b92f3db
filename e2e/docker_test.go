package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"go.yaml.in/yaml/v3"

	"github.com/ferry-io/ferry/config"
	"github.com/ferry-io/ferry/internal/testenv"
)

// There is no Docker engine in CI, so docker/ is checked by reading it:
// what a parser can tell about compose.yaml, the Dockerfile and
// .dockerignore, and the image's healthcheck command run with the built
// binary.

// repoRoot is the module's root directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// composeService is the part of a compose service the tests read.
type composeService struct {
	Image       string            `yaml:"image"`
	Build       *composeBuild     `yaml:"build"`
	Restart     string            `yaml:"restart"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

func readCompose(t *testing.T) map[string]composeService {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "docker", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("docker/compose.yaml: %v", err)
	}
	if len(f.Services) == 0 {
		t.Fatal("docker/compose.yaml has no services")
	}
	return f.Services
}

var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}`)

// interpolate is what compose makes of a value when none of the variables
// it names is set: ${NAME:-default} and ${NAME-default} give the default,
// ${NAME} the empty string. Any other use of $ fails the test, as this
// reading could not vouch for it.
func interpolate(t *testing.T, v string) string {
	t.Helper()
	out := interpolation.ReplaceAllString(v, "$2")
	if strings.Contains(strings.ReplaceAll(out, "$$", ""), "$") {
		t.Errorf("docker/compose.yaml: %q uses interpolation this test does not read", v)
	}
	return strings.ReplaceAll(out, "$$", "$")
}

// dockerfile is what the tests read from docker/Dockerfile: the final
// stage's ENV settings, its ENTRYPOINT and its HEALTHCHECK command.
type dockerfile struct {
	env         map[string]string
	entrypoint  []string
	healthcheck []string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "docker", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// Instructions continue over lines ending in a backslash.
	text := regexp.MustCompile(`\\\n\s*`).ReplaceAllString(string(b), " ")
	d := dockerfile{env: map[string]string{}}
	for _, line := range strings.Split(text, "\n") {
		word, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch strings.ToUpper(word) {
		case "FROM":
			d = dockerfile{env: map[string]string{}} // only the final stage counts
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("docker/Dockerfile: ENV %q is not KEY=VALUE", kv)
				}
				d.env[k] = v
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &d.entrypoint); err != nil {
				t.Fatalf("docker/Dockerfile: ENTRYPOINT %s is not the exec form: %v", rest, err)
			}
		case "HEALTHCHECK":
			_, cmd, ok := strings.Cut(rest, "CMD ")
			if !ok || json.Unmarshal([]byte(cmd), &d.healthcheck) != nil {
				t.Fatalf("docker/Dockerfile: HEALTHCHECK %s is not CMD in the exec form (the image has no shell)", rest)
			}
		}
	}
	return d
}

// ferryService finds the service built from docker/Dockerfile.
func ferryService(t *testing.T, services map[string]composeService) composeService {
	t.Helper()
	for _, s := range services {
		if s.Build != nil && s.Build.Dockerfile == "docker/Dockerfile" {
			return s
		}
	}
	t.Fatal("docker/compose.yaml builds no service from docker/Dockerfile")
	return composeService{}
}

// docker/compose.yaml pulls pinned release tags, restarts what it runs,
// sets only FERRY_* variables ferry knows (and values config.Load
// accepts), points ferry at the S3 service it starts with that service's
// credentials, gives the S3 server its CORS origin from the same variable
// as ferry's, and checks ferry's health with a command the image has.
func TestComposeFile(t *testing.T) {
	services := readCompose(t)
	df := readDockerfile(t)
	known := map[string]bool{}
	for _, d := range config.Defaults() {
		known[d[0]] = true
	}
	for name, s := range services {
		if s.Build == nil {
			repo, tag, ok := strings.Cut(s.Image[strings.LastIndex(s.Image, "/")+1:], ":")
			if !ok || tag == "" || tag == "latest" || repo == "" {
				t.Errorf("service %s pulls %q: pin a release tag", name, s.Image)
			}
		}
		if !slices.Contains([]string{"always", "unless-stopped", "on-failure"}, s.Restart) {
			t.Errorf("service %s has restart %q: it would stay down after a crash or a reboot", name, s.Restart)
		}
		if len(s.Healthcheck.Test) == 0 {
			t.Errorf("service %s has no healthcheck", name)
		}
	}

	ferry := ferryService(t, services)
	env := map[string]string{}
	for k, v := range df.env {
		env[k] = v
	}
	for k, v := range ferry.Environment {
		env[k] = interpolate(t, v)
	}
	for k := range env {
		if !known[k] {
			t.Errorf("docker/ sets %s, which config.Load does not read", k)
		}
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("ferry refuses compose.yaml's settings: %v", err)
	}

	// ferry reaches the S3 service by its name and port, with its root
	// account; presigned URLs name a port that service publishes.
	s3URL, err := url.Parse(cfg.S3Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	s3, ok := services[s3URL.Hostname()]
	if !ok {
		t.Fatalf("FERRY_S3_ENDPOINT %s names no service of compose.yaml", cfg.S3Endpoint)
	}
	if got := strings.TrimPrefix(s3.Environment["VGW_PORT"], ":"); got != s3URL.Port() {
		t.Errorf("FERRY_S3_ENDPOINT %s, but the S3 service listens on %q", cfg.S3Endpoint, s3.Environment["VGW_PORT"])
	}
	if cfg.S3AccessKey != s3.Environment["ROOT_ACCESS_KEY"] || cfg.S3SecretKey != s3.Environment["ROOT_SECRET_KEY"] {
		t.Errorf("ferry's S3 credentials are not the S3 service's root account")
	}
	pub, err := url.Parse(cfg.S3PublicEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(s3.Ports, pub.Port()+":"+s3URL.Port()) {
		t.Errorf("FERRY_S3_PUBLIC_ENDPOINT %s: the S3 service publishes %v, not host port %s on its port %s", cfg.S3PublicEndpoint, s3.Ports, pub.Port(), s3URL.Port())
	}
	// Browser origins come from the variables ferry reads; the gateway's
	// fallback origin is the same expression as ferry's public URL.
	for _, k := range []string{"FERRY_PUBLIC_URL", "FERRY_CORS_ORIGINS"} {
		if !strings.HasPrefix(ferry.Environment[k], "${"+k) {
			t.Errorf("ferry's %s is %q, not taken from the variable %s", k, ferry.Environment[k], k)
		}
	}
	if got := s3.Environment["VGW_CORS_ALLOW_ORIGIN"]; got != ferry.Environment["FERRY_PUBLIC_URL"] {
		t.Errorf("the S3 server's CORS origin is %q, ferry's public URL %q: they must come from the same variable", got, ferry.Environment["FERRY_PUBLIC_URL"])
	}

	// The healthchecks run the binary where the image puts it.
	for what, hc := range map[string][]string{"compose.yaml": ferry.Healthcheck.Test, "the Dockerfile's HEALTHCHECK": append([]string{"CMD"}, df.healthcheck...)} {
		if len(hc) < 3 || hc[0] != "CMD" || len(df.entrypoint) == 0 || hc[1] != df.entrypoint[0] || hc[2] != "healthcheck" {
			t.Errorf("%s checks ferry with %q; want [CMD %s healthcheck …] (the image has no shell)", what, hc, strings.Join(df.entrypoint, " "))
		}
	}
}

// healthcheckArgs are the arguments of the image's healthcheck commands
// after the binary, compose.yaml's and the Dockerfile's.
func healthcheckArgs(t *testing.T) map[string][]string {
	t.Helper()
	ferry := ferryService(t, readCompose(t))
	df := readDockerfile(t)
	if len(ferry.Healthcheck.Test) < 3 || len(df.healthcheck) < 2 {
		t.Fatalf("no healthcheck command: compose %q, Dockerfile %q", ferry.Healthcheck.Test, df.healthcheck)
	}
	return map[string][]string{"compose": ferry.Healthcheck.Test[2:], "Dockerfile": df.healthcheck[1:]}
}

// healthcheck runs the binary with args on the environment env and
// returns its exit code, its output and how long it took.
func healthcheck(t *testing.T, env []string, args ...string) (int, string, time.Duration) {
	t.Helper()
	cmd := exec.Command(ferryBinary(t), args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Dir = t.TempDir()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out), took
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out), took
}

// The image's healthcheck commands, run with the built binary, pass while
// ferry is ready, fail (exit 1, naming the check) while its bucket is
// unreachable, where --live still passes, and fail within their timeout
// when nothing or a mute peer listens on FERRY_ADDR.
func TestImageHealthcheck(t *testing.T) {
	t.Parallel()
	f, p := faultyS3(t, Options{})
	for name, args := range healthcheckArgs(t) {
		if code, out, _ := healthcheck(t, f.Env, args...); code != 0 || !strings.Contains(out, `"status":"ok"`) {
			t.Fatalf("%s healthcheck of a ready ferry: exit %d\n%s", name, code, out)
		}
	}

	p.Refuse()
	p.ResetAll()
	deadline := time.Now().Add(30 * time.Second)
	for code, _ := readyStatus(t, f); code != 503; code, _ = readyStatus(t, f) {
		if time.Now().After(deadline) {
			t.Fatal("readyz still 200 with the bucket unreachable")
		}
		time.Sleep(200 * time.Millisecond)
	}
	for name, args := range healthcheckArgs(t) {
		if code, out, _ := healthcheck(t, f.Env, args...); code != 1 || !strings.Contains(out, `"bucket":"fail"`) {
			t.Errorf("%s healthcheck with the bucket down: exit %d, want 1 naming the bucket\n%s", name, code, out)
		}
	}
	if code, out, _ := healthcheck(t, f.Env, "healthcheck", "--live"); code != 0 {
		t.Errorf("healthcheck --live with the bucket down: exit %d, want 0 (the process answers)\n%s", code, out)
	}
	if err := p.Accept(); err != nil {
		t.Fatal(err)
	}

	f.Kill()
	if code, out, took := healthcheck(t, f.Env, "healthcheck"); code != 1 || took > 10*time.Second {
		t.Errorf("healthcheck with ferry stopped: exit %d after %s, want 1 at once\n%s", code, took, out)
	}
	mute := listen(t) // accepts connections and never answers
	if code, out, took := healthcheck(t, []string{"FERRY_ADDR=" + mute.Addr().String()}, "healthcheck", "--timeout", "1s"); code != 1 || took > 5*time.Second {
		t.Errorf("healthcheck of a mute peer: exit %d after %s, want 1 within its 1s timeout\n%s", code, took, out)
	}
	if code, out, _ := healthcheck(t, nil, "healthcheck", "--no-such-flag"); code != 1 {
		t.Errorf("healthcheck with a bad flag: exit %d, want 1 (Docker reserves 2)\n%s", code, out)
	}
}

// .dockerignore keeps secrets, local builds and npm trees out of the build
// context, judged by the matcher Docker itself uses, and leaves in every
// file the build of cmd/ferry reads.
func TestDockerignore(t *testing.T) {
	root := repoRoot()
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	excluded := func(path string) bool {
		m, err := pm.MatchesOrParentMatches(path)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, path := range []string{
		"ferry-data/link-keys", "ferry-data/ferry.db", "ferry-data/s3/ferry/uploads/x", // keys, database, objects
		"cmd/ferry/ferry-data/link-keys", // ferry run from another directory
		".env", "docker/.env", ".env.local", ".git/config",
		"ferry", "e2e/e2e.test", "cover.out", // local binaries and test output
		"web/node_modules/esbuild/bin/esbuild", "e2e/browser/node_modules/x/index.js",
		"bench/work/ferry.db", "e2e/artifacts/upload.png",
	} {
		if !excluded(path) {
			t.Errorf(".dockerignore lets %s into the build context", path)
		}
	}

	// What the image's build reads: go.mod, go.sum, and every Go file and
	// embedded file of the packages cmd/ferry is built from.
	cmd := exec.Command("go", "list", "-deps", "-json=Dir,GoFiles,EmbedFiles,Module", "./cmd/ferry")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	needed := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			Dir                 string
			GoFiles, EmbedFiles []string
			Module              *struct{ Main bool }
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || !p.Module.Main {
			continue
		}
		for _, name := range append(p.GoFiles, p.EmbedFiles...) {
			rel, err := filepath.Rel(root, filepath.Join(p.Dir, name))
			if err != nil {
				t.Fatal(err)
			}
			needed = append(needed, filepath.ToSlash(rel))
		}
	}
	if len(needed) < 50 {
		t.Fatalf("go list found only %d files the build needs", len(needed))
	}
	for _, path := range needed {
		if excluded(path) {
			t.Errorf(".dockerignore leaves out %s, which the image's build needs", path)
		}
	}
}

// Issue 17, item 5: run alone, the image's embedded S3 server listens on
// every interface (FERRY_S3_EMBEDDED_ADDR=0.0.0.0:PORT) and presigned URLs
// name FERRY_S3_PUBLIC_ENDPOINT, the published port, through which a PUT
// stores the part: the upload verifies and downloads whole.
func TestEmbeddedS3OnAPublicEndpoint(t *testing.T) {
	t.Parallel()
	_, port, err := net.SplitHostPort(testenv.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	public := "http://127.0.0.1:" + port
	f := Start(t, Options{Env: map[string]string{
		"FERRY_S3_EMBEDDED_ADDR":   "0.0.0.0:" + port,
		"FERRY_S3_PUBLIC_ENDPOINT": public,
	}})
	_, tok := f.CreateUser("alice", false)

	data := randomData(3*mib + 17)
	sum := sha256.Sum256(data)
	r := f.Do("POST", "/uploads", tok, map[string]any{"file_name": "alone.bin", "size": len(data), "part_size": 5 * mib,
		"checksum_algorithm": "CRC32C", "first_part_crc32c": crc32c(data)})
	want(t, r, 201, "")
	var up uploadJSON
	r.JSON(t, &up)
	part := f.presignChecked(tok, up.UploadID, map[int][]byte{1: data})["1"]
	u, err := url.Parse(part.URL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme+"://"+u.Host != public {
		t.Fatalf("the presigned URL names %s://%s, want the public endpoint %s", u.Scheme, u.Host, public)
	}
	if code, _, err := putPart(part, bytes.NewReader(data), int64(len(data))); err != nil || code != 200 {
		t.Fatalf("PUT through the public endpoint: %d %v", code, err)
	}
	r = f.Do("POST", "/uploads/"+up.UploadID+"/complete", tok, map[string]any{"checksum_crc32c": crc32c(data), "sha256": hex.EncodeToString(sum[:])})
	want(t, r, 202, "")
	done := waitUpload(t, f, tok, up.UploadID)
	var file struct {
		DownloadURL string `json:"download_url"`
	}
	f.Do("GET", "/files/"+done.FileID, tok, nil).JSON(t, &file)
	got, _ := download(t, file.DownloadURL)
	if g := sha256.Sum256(got); g != sum {
		t.Fatalf("downloaded %d bytes hashing to %x, sent %d hashing to %x", len(got), g, len(data), sum)
	}
	t.Logf("embedded S3 on 0.0.0.0:%s, presigned for %s: %d bytes uploaded and downloaded whole", port, public, len(data))
}
