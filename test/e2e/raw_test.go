package e2e

import (
	"io"
	"net/http"
	"testing"
)

func newRawRequest(t *testing.T, url, cookie string) *http.Request {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Cookie", "stickyd_conn="+cookie)
	return req
}

func rawDo(t *testing.T, req *http.Request) (*http.Response, string) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
