package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

// Buckets on the shared S3 server, one per contender so nothing collides.
const (
	ferryBucket = "ferry"
	rawBucket   = "raw"
	tusdBucket  = "tusd"
)

// startS3 runs the standalone VersityGW every case shares, on loopback,
// with fresh root credentials and an empty POSIX root.
func (b *bench) startS3(ctx context.Context, bin string) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	root := filepath.Join(b.work, "s3")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	ak, sk := "bench"+randomKey(6), randomKey(20)
	// --keep-alive: real S3 keeps connections open, and so does ferry's
	// embedded gateway; --quiet: no per-request log line on stdout.
	b.vgw, err = startProcess("versitygw", bin,
		[]string{"--port", addr, "--keep-alive", "--quiet", "posix", root},
		cleanEnv("ROOT_ACCESS_KEY="+ak, "ROOT_SECRET_KEY="+sk), b.work, filepath.Join(b.work, "versitygw.log"))
	if err != nil {
		return err
	}
	b.s3URL = "http://" + addr
	// Any HTTP answer (403 to an anonymous request) means it is serving.
	if err := waitHTTP(ctx, b.vgw, b.s3URL+"/", func(int) bool { return true }, 30*time.Second); err != nil {
		return err
	}
	b.s3 = newS3(b.s3URL, ak, sk)
	for _, bucket := range []string{rawBucket, tusdBucket} {
		if err := createBucket(ctx, b.s3, bucket); err != nil {
			return fmt.Errorf("create bucket %s: %w", bucket, err)
		}
	}
	b.log.Info("versitygw ready", "endpoint", b.s3URL, "pid", b.vgw.pid())
	return nil
}

// ferryEnv configures ferry on the shared VersityGW: never its embedded
// S3, whose CPU would then be counted as ferry's.
func (b *bench) ferryEnv(addr, dsn string) []string {
	creds := b.s3.Options().Credentials
	c, _ := creds.Retrieve(context.Background())
	env := cleanEnv(
		"FERRY_ADDR="+addr,
		"FERRY_PUBLIC_URL=http://"+addr,
		"FERRY_DATA_DIR="+filepath.Join(b.work, "ferry-data"),
		"FERRY_S3_ENDPOINT="+b.s3URL,
		"FERRY_S3_ACCESS_KEY="+c.AccessKeyID,
		"FERRY_S3_SECRET_KEY="+c.SecretAccessKey,
		"FERRY_S3_BUCKET="+ferryBucket,
		"FERRY_PART_SIZE="+strconv.FormatInt(b.o.partSize, 10),
	)
	if dsn != "" {
		env = append(env, "FERRY_DB_DRIVER=mysql", "FERRY_DB_DSN="+dsn)
	}
	return env
}

var tokenLine = regexp.MustCompile(`token \(shown once\): (\S+)`)

// startFerry creates an admin user (which also migrates the database),
// then runs `ferry serve` and waits for /readyz.
func (b *bench) startFerry(ctx context.Context, dsn string) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	env := b.ferryEnv(addr, dsn)
	cmd := exec.CommandContext(ctx, b.ferryBin, "user", "create", "bench", "--admin")
	cmd.Env, cmd.Dir = env, b.work
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ferry user create: %w\n%s", err, out)
	}
	m := tokenLine.FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("ferry user create printed no token:\n%s", out)
	}
	b.token = string(m[1])

	b.ferry, err = startProcess("ferry serve", b.ferryBin, []string{"serve"}, env, b.work, filepath.Join(b.work, "ferry.log"))
	if err != nil {
		return err
	}
	b.ferryURL = "http://" + addr
	ok := func(s int) bool { return s == http.StatusOK }
	if err := waitHTTP(ctx, b.ferry, b.ferryURL+"/readyz", ok, 60*time.Second); err != nil {
		return err
	}
	b.log.Info("ferry ready", "url", b.ferryURL, "pid", b.ferry.pid())
	return nil
}

// startTusd runs tusd with its S3 store on the shared VersityGW, with
// tusd's default store settings (50 MiB parts, 10 part uploads at once,
// MD5 and SHA-256 of every part): what a tusd deployment runs.
func (b *bench) startTusd(ctx context.Context, bin string) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(addr)
	c, _ := b.s3.Options().Credentials.Retrieve(ctx)
	tmp := filepath.Join(b.work, "tusd-tmp") // where the S3 store buffers parts
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	env := cleanEnv(
		"AWS_ACCESS_KEY_ID="+c.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+c.SecretAccessKey, "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true", "TMPDIR="+tmp,
	)
	b.tusd, err = startProcess("tusd", bin, []string{
		"-host", host, "-port", port, "-base-path", "/files/",
		"-s3-bucket", tusdBucket, "-s3-endpoint", b.s3URL,
	}, env, b.work, filepath.Join(b.work, "tusd.log"))
	if err != nil {
		return err
	}
	b.tusdURL = "http://" + addr
	ok := func(s int) bool { return s == http.StatusOK }
	if err := waitHTTP(ctx, b.tusd, b.tusdURL+"/metrics", ok, 30*time.Second); err != nil {
		return err
	}
	b.log.Info("tusd ready", "url", b.tusdURL, "pid", b.tusd.pid())
	return nil
}

// api calls ferry's API as the bench user and decodes a JSON answer.
func (b *bench) api(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, b.ferryURL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+b.token)
	b.apiCalls.Add(1)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (b *bench) deleteFile(ctx context.Context, fileID string) error {
	return b.api(ctx, http.MethodDelete, "/files/"+fileID, nil)
}
