package dockerd

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// ImageRepo is the repository of the sidecar image.
const ImageRepo = "vak-dockerd"

// LabelImageRecipe records the recipe hash an image was built from.
const LabelImageRecipe = "vak.dockerd.recipe"

// Recipe is what the sidecar image is built from: a Debian minbase root
// (debootstrap) plus these packages. Its hash is the image tag, so a
// changed recipe builds a new image and an unchanged one is reused.
type Recipe struct {
	Suite    string
	Packages []string
}

// DefaultRecipe: Debian bookworm's docker.io (dockerd, containerd, runc,
// docker-proxy, tini), the iptables/nftables userland dockerd drives, and
// ca-certificates for the vak CA.
var DefaultRecipe = Recipe{
	Suite:    "bookworm",
	Packages: []string{"docker.io", "iptables", "nftables", "iproute2", "ca-certificates", "procps"},
}

// recipeVersion changes when the build steps change.
const recipeVersion = "1"

// Tag is the recipe's content-derived image tag.
func (r Recipe) Tag() string {
	h := sha256.New()
	h.Write([]byte("vak-dockerd " + recipeVersion + "\n" + r.Suite + "\n" + strings.Join(r.Packages, " ") + "\n"))
	return ImageRepo + ":" + hex.EncodeToString(h.Sum(nil)[:8])
}
