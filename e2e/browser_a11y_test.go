package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ferry-io/ferry/client"
)

// Issue 20, items 3, 4, 10 and 12, and its accessibility Done-when: each
// screen (sign-in, upload, files, exports) passes axe-core with no serious
// or critical violation; none scrolls sideways at 375 px or at 200 % zoom;
// an upload's screen-reader announcements are its state changes only,
// from the one status region, while its progress bar carries its value;
// the files list shows the files past the first 100 on request.
// Screenshots of each screen at desktop and phone width go to
// e2e/artifacts (docs/img holds a copy).
func TestBrowserAccessibilityAndReflow(t *testing.T) {
	requireBrowser(t)
	f := Start(t, Options{Env: map[string]string{"FERRY_JOB_POLL": "50ms"}})
	_, tok := f.CreateUser("alice", false)
	// 102 small files, so the list has a second page, some with the long
	// names that break layouts.
	const nFiles = 102
	dir := t.TempDir()
	ac := client.New(f.URL, tok)
	var wg sync.WaitGroup
	errs := make(chan error, nFiles)
	next := make(chan int, nFiles)
	for i := range nFiles {
		next <- i
	}
	close(next)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				name := fmt.Sprintf("report-%03d.pdf", i)
				if i%10 == 0 {
					name = fmt.Sprintf("quarterly-results-presentation-final-version-%03d-with-appendices.pdf", i)
				}
				path, _ := writeRandomFile(t, dir, name, 2000+i)
				if _, err := ac.UploadFile(context.Background(), path, client.UploadOptions{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var conv struct{ ID string }
	f.Do("POST", "/conversations", tok, map[string]any{"title": "team"}).JSON(t, &conv)
	f.Do("POST", "/conversations/"+conv.ID+"/messages", tok, map[string]any{"body": "hello"})
	for i, scope := range []string{"all", "conv:" + conv.ID} {
		want(t, f.Do("POST", "/exports", tok, map[string]any{"scope": scope}, "Idempotency-Key", fmt.Sprintf(`"a11y-%d"`, i)), 202, "")
	}
	path, _ := randomFile(t, "holiday.mp4", 24*mib)

	type violation struct {
		ID      string   `json:"id"`
		Impact  string   `json:"impact"`
		Help    string   `json:"help"`
		Targets []string `json:"targets"`
	}
	var res struct {
		Audits []struct {
			Screen     string      `json:"screen"`
			Violations []violation `json:"violations"`
			Passes     []string    `json:"passes"`
		} `json:"audits"`
		Reflow []struct {
			Screen   string `json:"screen"`
			Viewport string `json:"viewport"`
			Overflow int    `json:"overflow"`
		} `json:"reflow"`
		FocusAfterSignIn string `json:"focusAfterSignIn"`
		Live             struct {
			Said          []string `json:"said"`
			Ticks         int      `json:"ticks"`
			LiveAncestors []string `json:"liveAncestors"`
			ValueNow      string   `json:"valueNow"`
			ValueText     string   `json:"valueText"`
		} `json:"live"`
		Files struct {
			FirstPage int  `json:"firstPage"`
			More      bool `json:"more"`
			All       int  `json:"all"`
			MoreAfter bool `json:"moreAfter"`
		} `json:"files"`
		EndKey   string `json:"endKey"`
		DoneLink string `json:"doneLink"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-a11y", "url": f.URL, "token": tok, "file": path, "exports": 2}, &res)

	screens := 0
	for _, a := range res.Audits {
		screens++
		// axe really checked the screen: contrast, names and ARIA among
		// the rules that passed.
		for _, rule := range []string{"color-contrast", "button-name", "aria-allowed-attr"} {
			if !slices.Contains(a.Passes, rule) {
				t.Errorf("axe on %s did not pass %s (passed %v)", a.Screen, rule, a.Passes)
			}
		}
		for _, v := range a.Violations {
			t.Logf("axe on %s: %s (%s): %s %v", a.Screen, v.ID, v.Impact, v.Help, v.Targets)
			if v.Impact == "serious" || v.Impact == "critical" {
				t.Errorf("axe on %s: %s violation %s: %s at %v", a.Screen, v.Impact, v.ID, v.Help, v.Targets)
			}
		}
	}
	if screens != 4 {
		t.Fatalf("axe ran on %d screens, want 4", screens)
	}
	for _, r := range res.Reflow {
		if r.Overflow > 0 {
			t.Errorf("%s at %s scrolls sideways by %d px", r.Screen, r.Viewport, r.Overflow)
		}
	}
	if len(res.Reflow) != 8 {
		t.Fatalf("reflow checked %d screen/viewport pairs, want 8", len(res.Reflow))
	}
	t.Logf("status region said %q while the progress bar changed %d times", res.Live.Said, res.Live.Ticks)
	if len(res.Live.LiveAncestors) != 0 {
		t.Errorf("the upload list sits in live regions %v", res.Live.LiveAncestors)
	}
	if n := len(res.Live.Said); n == 0 || n > 6 || res.Live.Ticks < 10 || res.Live.Said[n-1] != "holiday.mp4 uploaded" {
		t.Errorf("announcements %q for %d progress changes: want a few state changes ending in the success", res.Live.Said, res.Live.Ticks)
	}
	for _, s := range res.Live.Said {
		if strings.ContainsAny(s, "%") || strings.Contains(s, "MiB") {
			t.Errorf("progress announced: %q", s)
		}
	}
	if res.Live.ValueNow != "100" || !strings.HasPrefix(res.Live.ValueText, "100%") {
		t.Errorf("the finished bar says aria-valuenow %q, aria-valuetext %q", res.Live.ValueNow, res.Live.ValueText)
	}
	if res.Files.FirstPage != 100 || !res.Files.More || res.Files.All != nFiles+1 || res.Files.MoreAfter {
		t.Errorf("files: %+v, want 100, then all %d with no more button", res.Files, nFiles+1)
	}
	// Item 16: a done card links to its file.
	if !strings.HasPrefix(res.DoneLink, f.URL+"/download/fil_") {
		t.Errorf("the done card links to %q", res.DoneLink)
	}
	if res.FocusAfterSignIn != "tab-upload" || res.EndKey != "tab-exports" {
		t.Errorf("focus after sign-in on %q, after End on %q", res.FocusAfterSignIn, res.EndKey)
	}
}
