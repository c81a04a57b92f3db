package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// findAWSCLI returns the path of the AWS CLI named by the -aws flag (a
// path, or a name looked up on PATH) and its version line, or "" when
// there is none or the flag says "none" (Debian: apt-get install awscli);
// the case is then left out of the run.
func findAWSCLI(ctx context.Context, name string) (path, version string) {
	if name == "none" {
		return "", ""
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", ""
	}
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return "", ""
	}
	return path, strings.TrimSpace(string(out))
}

// awsUpload runs `aws s3 cp` of the file into the raw bucket, as a person
// with the AWS CLI would upload it, set to ferry's part size and
// concurrency (multipart_chunksize, max_concurrent_requests) and otherwise
// with the CLI's defaults, including whatever checksum its version sends.
// Its wall time includes the CLI's own start-up, as ferry's does.
func (b *bench) awsUpload(ctx context.Context) (result, error) {
	cfg := filepath.Join(b.work, "aws-config")
	conf := fmt.Sprintf("[default]\nregion = us-east-1\ns3 =\n    multipart_threshold = %d\n    multipart_chunksize = %d\n    max_concurrent_requests = %d\n",
		b.o.partSize, b.o.partSize, b.o.concurrency)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		return result{Case: caseAWSCLIUpload}, err
	}
	c, err := b.s3.Options().Credentials.Retrieve(ctx)
	if err != nil {
		return result{Case: caseAWSCLIUpload}, err
	}
	key := "bench/" + randomKey(8)
	cmd := exec.CommandContext(ctx, b.aws, "s3", "cp", b.file, "s3://"+rawBucket+"/"+key,
		"--endpoint-url", b.s3URL, "--only-show-errors", "--no-progress")
	cmd.Env = cleanEnv("AWS_CONFIG_FILE="+cfg, "AWS_SHARED_CREDENTIALS_FILE="+os.DevNull,
		"AWS_ACCESS_KEY_ID="+c.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+c.SecretAccessKey, "AWS_EC2_METADATA_DISABLED=true")
	cmd.Dir = b.work
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	w, err := b.begin(ctx, nil, "")
	if err != nil {
		return result{Case: caseAWSCLIUpload}, err
	}
	err = cmd.Run()
	r, _, err2 := w.end(ctx, caseAWSCLIUpload, b.o.size)
	r.ClientCPU, r.Tool = cpuOf(cmd.ProcessState), b.awsVersion
	if err != nil {
		return r, fmt.Errorf("aws s3 cp: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err2 != nil {
		return r, err2
	}
	return r, b.checkObject(ctx, rawBucket, key)
}
