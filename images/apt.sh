# shellcheck shell=bash
# The private apt sandbox of the image build (sourced by images/build and
# images/igt): needs $cache, log and die.

# ---------------------------------------------------------------- apt sandbox
# A private apt state directory whose sources list names the suites that carry
# linux-source-7.2 and rust-src. Packages are only downloaded and unpacked with
# dpkg -x: nothing is installed into the host.
apt_dir=$cache/apt
apt_opts=(-o "Dir::State=$apt_dir/state" -o "Dir::State::status=$apt_dir/state/status"
          -o "Dir::Cache=$apt_dir/cache" -o "Dir::Etc::SourceList=$apt_dir/sources.list"
          -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d" -o "Dir::Etc::Preferences=$apt_dir/preferences"
          -o "Dir::Etc::PreferencesParts=$apt_dir/preferences.d"
          -o "APT::Architecture=amd64" -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1")

apt_setup() {
    mkdir -p "$apt_dir"/state/lists/partial "$apt_dir"/cache/archives/partial \
             "$apt_dir"/sources.list.d "$apt_dir"/preferences.d "$apt_dir"/debs
    touch "$apt_dir/state/status" "$apt_dir/preferences"
    cat > "$apt_dir/sources.list" <<'SRC'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie-backports main
SRC
    # Refresh the lists at most once a day.
    local stamp=$apt_dir/state/updated
    if [ ! -f "$stamp" ] || [ -n "$(find "$stamp" -mmin +1440)" ]; then
        log "refreshing the private package lists (sid, trixie-backports)"
        if apt-get "${apt_opts[@]}" update -qq >/dev/null; then
            touch "$stamp"
        elif [ -n "$(ls "$apt_dir"/state/lists/*_Packages* 2>/dev/null)" ]; then
            # Offline (an offline bundle, a cut network): the lists from the
            # last refresh still name the pinned versions in the cache.
            log "WARNING: apt-get update of the private lists failed; using the lists of $(date -r "$stamp" +%F 2>/dev/null || echo 'an earlier refresh')"
        else
            die "apt-get update of the private lists failed"
        fi
    fi
}

# versions_of PKG -> all versions offered, newest first
versions_of() { apt-cache "${apt_opts[@]}" madison "$1" 2>/dev/null | awk -F'|' '{gsub(/ /,"",$2); print $2}'; }

# fetch_deb PKG VERSION -> path of the .deb in the cache
fetch_deb() {
    local pkg=$1 ver=$2 f
    f=$(ls "$apt_dir/debs/${pkg}_${ver//:/%3a}_"*.deb 2>/dev/null | head -1 || true)
    if [ -z "$f" ]; then
        log "downloading $pkg=$ver"
        (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download -qq "$pkg=$ver" >/dev/null 2>&1) \
            || die "apt-get download $pkg=$ver failed"
        f=$(ls "$apt_dir/debs/${pkg}_"*.deb | grep -F "_${ver//:/%3a}_" | head -1)
    fi
    echo "$f"
}

