package main

import (
	"slices"
	"testing"

	"github.com/cellbox/cellbox/internal/config"
)

func TestParseSetups(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string // names; nil: an error
	}{
		{"runc", []string{"runc"}},
		{"runc, runc-image,docker,runsc,runsc-image,docker-runsc", []string{"runc", "runc-image", "docker", "runsc", "runsc-image", "docker-runsc"}},
		{"docker,runc,", []string{"docker", "runc"}},
		{"", nil},
		{",", nil},
		{"runc,runc", nil},
		{"crun", nil},
		{"local-unsafe", nil},
	} {
		got, err := parseSetups(tt.in)
		if tt.want == nil {
			if err == nil {
				t.Errorf("parseSetups(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		var names []string
		for _, st := range got {
			names = append(names, st.name)
		}
		if err != nil || !slices.Equal(names, tt.want) {
			t.Errorf("parseSetups(%q) = %v, %v; want %v", tt.in, names, err, tt.want)
		}
	}
}

// Every setup is a valid configuration, on its own state folder under the bench's, with
// the bench's images, and its name is what the same flags give without --setups.
func TestSetupApply(t *testing.T) {
	base := config.Default()
	base.StateDir = "/s"
	for _, st := range setups {
		t.Run(st.name, func(t *testing.T) {
			c := st.apply(base)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if c.StateDir != "/s/"+st.name || c.Images() != "/s/images" {
				t.Errorf("state dir %s, images %s; want /s/%s, /s/images", c.StateDir, c.Images(), st.name)
			}
			if got := setupOf(c).name; got != st.name {
				t.Errorf("setupOf(its config) = %s", got)
			}
			if image := c.DefaultImage() != ""; image != (st.rootfs != "host") {
				t.Errorf("runs on an image: %v, want %v", image, st.rootfs != "host")
			}
		})
	}
	base.ImagesDir = "/images"
	if c := setups[1].apply(base); c.Images() != "/images" {
		t.Errorf("--images-dir /images: a setup's images are %s", c.Images())
	}
}
