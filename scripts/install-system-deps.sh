#!/usr/bin/env bash
# Debian packages llamactl's optional features use: PortAudio (microphone), eSpeak NG (speech),
# tmux (terminal tests), zsh and fish (completion tests), HAProxy and iproute2 (the scale-out
# tests: replicas in network namespaces behind a balancer), and cmake, ninja and g++ (llama.cpp
# built with its RPC backend for the --rpc test, scripts/rpc_build.py). Safe to re-run;
# prints what it could not install instead of failing.
#
# --test adds what only the test suite uses: PulseAudio, its tools and ALSA's pulse plugin (the
# tests on a real sound server), Chromium (the web page's tests, driven by Playwright) and
# alsa-utils (its recordings of a person speaking: the voice tests on human speech). A
# desktop whose sound is PipeWire keeps it: pulseaudio would replace pipewire-pulse, so it is
# left out there (those tests then skip, saying why).
set -uo pipefail
packages=(libportaudio2 espeak-ng tmux zsh fish haproxy iproute2 cmake ninja-build g++)
if [ "${1:-}" = "--test" ]; then
  packages+=(pulseaudio-utils libasound2-plugins chromium alsa-utils)
  dpkg -s pipewire-pulse >/dev/null 2>&1 || packages+=(pulseaudio)
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-system-deps: no apt-get here; install ${packages[*]} with your package manager" >&2
  exit 0
fi
sudo=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && sudo="sudo"
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
$sudo apt-get update -qq >/dev/null 2>&1 || true
if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1; then
  echo "install-system-deps: could not install ${missing[*]}; voice features will say what is missing" >&2
fi
exit 0
