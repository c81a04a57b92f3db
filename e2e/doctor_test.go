package e2e

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/cors"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/ferry-io/ferry/internal/testenv"
)

// runFerry runs the ferry binary with args in dir, with only the FERRY_*
// settings in env, and returns its exit code and output.
func runFerry(t *testing.T, dir string, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ferryBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("ferry %s did not end within 3 minutes:\n%s", strings.Join(args, " "), out.String())
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String()
}

// doctorRow returns the line of doctor's table for check.
func doctorRow(t *testing.T, out, check string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, check+"  ") {
			return line
		}
	}
	t.Fatalf("doctor printed no %q row:\n%s", check, out)
	return ""
}

func envList(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// Issue 16: `ferry doctor` passes on the zero-config default (only the
// ports moved off the defaults, so tests can run side by side), both on a
// data dir no ferry is serving, where doctor starts the embedded store
// itself, and beside a running ferry, whose embedded store it uses.
func TestDoctorPassesOnTheDefault(t *testing.T) {
	t.Parallel()
	t.Run("no ferry running", func(t *testing.T) {
		dir := t.TempDir()
		env := []string{"FERRY_S3_EMBEDDED_ADDR=" + testenv.FreeAddr(t)}
		if code, out := runFerry(t, dir, env, "migrate"); code != 0 {
			t.Fatalf("ferry migrate exited %d:\n%s", code, out)
		}
		code, out := runFerry(t, dir, env, "doctor")
		if code != 0 || !strings.Contains(out, "all checks passed") {
			t.Fatalf("ferry doctor exited %d, want 0:\n%s", code, out)
		}
		if row := doctorRow(t, out, "object store"); !strings.Contains(row, "started by doctor") {
			t.Errorf("object store row = %q, want doctor to have started the embedded store", row)
		}
	})
	t.Run("beside a running ferry", func(t *testing.T) {
		f := Start(t, Options{Env: map[string]string{"FERRY_S3_EMBEDDED_ADDR": testenv.FreeAddr(t)}})
		code, out := runFerry(t, f.Dir, f.Env, "doctor")
		if code != 0 {
			t.Fatalf("ferry doctor exited %d, want 0:\n%s", code, out)
		}
		if row := doctorRow(t, out, "object store"); !strings.Contains(row, "of the ferry running on") {
			t.Errorf("object store row = %q, want the running ferry's embedded store", row)
		}
		if row := doctorRow(t, out, "link keys"); !strings.Contains(row, "ok") || !strings.Contains(row, "link-keys") {
			t.Errorf("link keys row = %q, want the key serve generated", row)
		}
	})
}

// Issue 16: each broken dependency fails doctor with exit 1 and a row that
// names the FERRY_* setting to change.
func TestDoctorNamesTheSettingToChange(t *testing.T) {
	t.Parallel()
	srv := testenv.S3(t)
	var corsFix func(t *testing.T)
	cases := []struct {
		name    string
		env     func(t *testing.T) map[string]string
		check   string
		finding string // in the failing row
		setting string // in the failing row
		// fix, when set, repairs what env broke: doctor must then pass,
		// which shows the failure came from that one thing.
		fix func(t *testing.T)
	}{{
		name: "bucket CORS does not expose ETag",
		env: func(t *testing.T) map[string]string {
			bucket := "doctor-" + testenv.RandomHex(6)
			testenv.StoreFor(t, srv, bucket)
			via := testenv.S3ExposingOnlyTheRule(t, srv)
			origin := "http://127.0.0.1:18080"
			u, _ := url.Parse(srv.Endpoint)
			mc, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), Region: "us-east-1"})
			if err != nil {
				t.Fatal(err)
			}
			// Everything a browser needs except the exposed ETag: the
			// most common Uppy complaint.
			setRule := func(t *testing.T, expose ...string) {
				err := mc.SetBucketCors(context.Background(), bucket, cors.NewConfig([]cors.Rule{{
					AllowedOrigin: []string{origin}, AllowedMethod: []string{"PUT", "GET", "HEAD", "POST"},
					AllowedHeader: []string{"*"}, ExposeHeader: expose, MaxAgeSeconds: 60,
				}}))
				if err != nil {
					t.Fatal(err)
				}
			}
			setRule(t)
			corsFix = func(t *testing.T) { setRule(t, "ETag") }
			return map[string]string{
				"FERRY_S3_ENDPOINT": via.Endpoint, "FERRY_S3_ACCESS_KEY": srv.AccessKey, "FERRY_S3_SECRET_KEY": srv.SecretKey,
				"FERRY_S3_BUCKET": bucket, "FERRY_PUBLIC_URL": origin,
			}
		},
		check: "bucket CORS", finding: "does not expose ETag", setting: "FERRY_PUBLIC_URL",
		fix: func(t *testing.T) { corsFix(t) },
	}, {
		name: "public endpoint is wrong",
		env: func(t *testing.T) map[string]string {
			return map[string]string{
				"FERRY_S3_EMBEDDED_ADDR":   testenv.FreeAddr(t),
				"FERRY_S3_PUBLIC_ENDPOINT": "http://" + testenv.FreeAddr(t),
			}
		},
		check: "public endpoint", finding: "does not answer", setting: "FERRY_S3_PUBLIC_ENDPOINT",
	}, {
		name: "database unreachable",
		env: func(t *testing.T) map[string]string {
			return map[string]string{
				"FERRY_S3_EMBEDDED_ADDR": testenv.FreeAddr(t),
				"FERRY_DB_DRIVER":        "mysql",
				"FERRY_DB_DSN":           "root@tcp(" + testenv.FreeAddr(t) + ")/ferry",
			}
		},
		check: "database", finding: "mysql", setting: "FERRY_DB_DSN",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			env := envList(tc.env(t))
			if tc.check != "database" {
				if code, out := runFerry(t, dir, env, "migrate"); code != 0 {
					t.Fatalf("ferry migrate exited %d:\n%s", code, out)
				}
			}
			code, out := runFerry(t, dir, env, "doctor")
			if code != 1 {
				t.Fatalf("ferry doctor exited %d, want 1:\n%s", code, out)
			}
			row := doctorRow(t, out, tc.check)
			for _, want := range []string{"FAIL", tc.finding, tc.setting} {
				if !strings.Contains(row, want) {
					t.Errorf("%s row lacks %q:\n%s\n\nwhole output:\n%s", tc.check, want, row, out)
				}
			}
			if tc.fix != nil {
				tc.fix(t)
				if code, out := runFerry(t, dir, env, "doctor"); code != 0 {
					t.Errorf("after the fix, ferry doctor exited %d, want 0:\n%s", code, out)
				}
			}
		})
	}
}

// Issue 16: a webhook receiver that does not answer fails doctor, with
// the subscription to replace; one that answers passes.
func TestDoctorChecksWebhookReceivers(t *testing.T) {
	t.Parallel()
	up := newEventCounter(t)
	down := testenv.FreeAddr(t) // nothing listens there
	f := Start(t, Options{Env: map[string]string{"FERRY_WEBHOOK_ALLOW_PRIVATE": "true"}})
	want(t, f.Do("POST", "/admin/webhooks", f.Token, map[string]any{"url": up.srv.URL + "/h", "events": []string{"user.deleted"}}), 201, "")
	r := f.Do("POST", "/admin/webhooks", f.Token, map[string]any{"url": "http://" + down + "/h", "events": []string{"upload.completed"}})
	want(t, r, 201, "")
	var sub struct{ ID string }
	r.JSON(t, &sub)
	code, out := runFerry(t, f.Dir, f.Env, "doctor")
	if code != 1 {
		t.Fatalf("ferry doctor exited %d, want 1:\n%s", code, out)
	}
	row := doctorRow(t, out, "webhooks "+sub.ID)
	for _, want := range []string{"FAIL", down, "does not answer", "DELETE /admin/webhooks/" + sub.ID} {
		if !strings.Contains(row, want) {
			t.Errorf("webhook row lacks %q:\n%s", want, row)
		}
	}
	if n := strings.Count(out, "FAIL"); n != 1 {
		t.Errorf("%d failing rows, want only the unreachable receiver's:\n%s", n, out)
	}
}

// On the embedded store, doctor says whether a merge copies the upload or
// shares the parts' blocks, by asking the data dir's filesystem for a
// reflink: a warning on tmpfs (as on ext4), ok on XFS, whose reflinks
// make CompleteMultipartUpload free (docs/storage.md, "The embedded
// store's disk").
func TestDoctorSaysWhetherMergesCopy(t *testing.T) {
	t.Parallel()
	doctorOn := func(t *testing.T, parent string) string {
		t.Helper()
		dir, err := os.MkdirTemp(parent, "doctor-disk-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		env := []string{"FERRY_S3_EMBEDDED_ADDR=" + testenv.FreeAddr(t)}
		if code, out := runFerry(t, dir, env, "migrate"); code != 0 {
			t.Fatalf("ferry migrate exited %d:\n%s", code, out)
		}
		code, out := runFerry(t, dir, env, "doctor")
		if code != 0 {
			t.Fatalf("ferry doctor exited %d, want 0 (a copying merge is only a warning):\n%s", code, out)
		}
		return doctorRow(t, out, "store disk")
	}
	t.Run("tmpfs copies", func(t *testing.T) {
		t.Parallel()
		if mounts, _ := os.ReadFile("/proc/self/mounts"); !strings.Contains(string(mounts), " /dev/shm tmpfs ") {
			t.Skip("/dev/shm is not a tmpfs")
		}
		row := doctorOn(t, "/dev/shm")
		for _, want := range []string{"warn", "copies the whole upload", "XFS (reflink=1) or btrfs"} {
			if !strings.Contains(row, want) {
				t.Errorf("store disk row lacks %q:\n%s", want, row)
			}
		}
	})
	t.Run("XFS shares", func(t *testing.T) {
		t.Parallel()
		requireTool(t, "mkfs.xfs")
		if os.Geteuid() != 0 {
			t.Skip("mounting an XFS image needs root")
		}
		img := filepath.Join(t.TempDir(), "xfs.img")
		mnt := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		run := func(name string, args ...string) {
			t.Helper()
			if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
				t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
			}
		}
		// 512 MiB, sparse: above mkfs.xfs's minimum, and reflink=1 is
		// its default, as docs/storage.md says.
		run("truncate", "-s", "512M", img)
		run("mkfs.xfs", "-q", img)
		run("mount", "-o", "loop", img, mnt)
		t.Cleanup(func() {
			if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v\n%s", mnt, err, out)
			}
		})
		row := doctorOn(t, mnt)
		for _, want := range []string{"ok", "shares blocks", "copies no bytes"} {
			if !strings.Contains(row, want) {
				t.Errorf("store disk row lacks %q:\n%s", want, row)
			}
		}
	})
}
