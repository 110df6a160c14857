package config

import (
	"errors"
	"strings"
	"testing"
)

const good = `
id: n1
data_dir: /tmp/n1
mountpaths: [/tmp/n1/mp0, /tmp/n1/mp1]
public: [127.0.0.1:9000, 127.0.0.2:9000]
intra: [127.0.0.1:9100]
raft: 127.0.0.1:9200
bootstrap: true
cluster_secret: s3cret
s3:
  credentials:
    - {access_key: AK, secret_key: SK}
`

func TestParse(t *testing.T) {
	n, err := Parse([]byte(good), "good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if n.Voters != 3 || n.S3.Region != "us-east-1" || n.Space.Policy != "s3fifo" || n.DefaultCopies != 1 {
		t.Fatalf("defaults not applied: %+v", n)
	}
	if len(n.Public) != 2 || n.S3.Credentials[0].SecretKey != "SK" {
		t.Fatalf("fields not decoded: %+v", n)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name, edit, field string
	}{
		{"no id", "id: n1\n", "id"},
		{"wildcard listen", "public: [127.0.0.1:9000, 127.0.0.2:9000]\n", "public[0]"},
		{"no intra", "intra: [127.0.0.1:9100]\n", "intra"},
		{"bad raft", "raft: 127.0.0.1:9200\n", "raft[0]"},
		{"unknown field", "", "nosuchfield"},
		{"half credential", "    - {access_key: AK, secret_key: SK}\n", "s3.credentials[0]"},
		{"no seeds", "bootstrap: true\n", "seeds"},
		{"negative settle", "raft: 127.0.0.1:9200\n", "rebalance"},
		{"no cluster secret", "cluster_secret: s3cret\n", "cluster_secret"},
		{"nbd tls without key", "raft: 127.0.0.1:9200\n", "nbd_tls"},
		{"nbd client ca alone", "raft: 127.0.0.1:9200\n", "nbd_tls.client_ca"},
		{"intra tls migrate alone", "raft: 127.0.0.1:9200\n", "intra_tls_migrate"},
		{"unknown eviction policy", "raft: 127.0.0.1:9200\n", "space.policy"},
	}
	repl := map[string]string{
		"no id":                   "",
		"wildcard listen":         "public: [':9000']\n",
		"no intra":                "",
		"bad raft":                "raft: nohostport\n",
		"half credential":         "    - {access_key: AK}\n",
		"no seeds":                "",
		"negative settle":         "raft: 127.0.0.1:9200\nrebalance: {settle: -1s}\n",
		"no cluster secret":       "cluster_secret: \"\"\n",
		"nbd tls without key":     "raft: 127.0.0.1:9200\nnbd_tls: {cert: c.pem}\n",
		"nbd client ca alone":     "raft: 127.0.0.1:9200\nnbd_tls: {client_ca: ca.pem}\n",
		"intra tls migrate alone": "raft: 127.0.0.1:9200\nintra_tls_migrate: true\n",
		"unknown eviction policy": "raft: 127.0.0.1:9200\nspace: {policy: mru}\n",
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := good
			if tt.edit == "" {
				text += "nosuchfield: 1\n"
			} else {
				text = strings.Replace(good, tt.edit, repl[tt.name], 1)
			}
			_, err := Parse([]byte(text), "x.yaml")
			if err == nil {
				t.Fatal("accepted a bad config")
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error %q does not name field %q", err, tt.field)
			}
		})
	}
}
