// Talking to the model: the page opens /v1/realtime, sends the microphone as 24 kHz PCM16
// (the browser's echo cancellation on, so the answer played aloud is not heard as the user),
// plays the spoken answer as it streams, and stops playing when the user talks over it.
import { realtimeSocket } from "./api.js";

const RATE = 24000;
const SEND_EVERY = RATE / 10; // 100 ms of audio per append

function toBase64(int16) {
  const bytes = new Uint8Array(int16.buffer);
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

function fromBase64(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const pcm = new Int16Array(bytes.buffer, 0, bytes.length >> 1);
  const out = new Float32Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) out[i] = pcm[i] / 32768;
  return out;
}

export class VoiceSession {
  // `ui`: { state(text), heard(text), answerDelta(text), answerDone(), error(text) }
  constructor(ui, turnDetection) {
    this.ui = ui;
    this.turnDetection = turnDetection;
    this.playing = new Set();
    this.playAt = 0;
    this.pending = [];
    this.pendingLength = 0;
  }

  async start() {
    this.ui.state("Starting the microphone…");
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
    });
    this.context = new AudioContext({ sampleRate: RATE });
    await this.context.audioWorklet.addModule(new URL("mic-worklet.js", import.meta.url));
    const source = this.context.createMediaStreamSource(this.stream);
    this.capture = new AudioWorkletNode(this.context, "mic-capture");
    this.capture.port.onmessage = (e) => this.collect(e.data);
    source.connect(this.capture);
    this.ui.state("Connecting…");
    this.socket = realtimeSocket();
    this.socket.onmessage = (e) => this.receive(JSON.parse(e.data));
    this.socket.onclose = (e) => {
      if (!this.stopped) this.ui.error(`The voice connection closed (${e.code}${e.reason ? `: ${e.reason}` : ""}).`);
      this.stop();
    };
    this.socket.onerror = () => this.ui.error("The voice connection failed (is the key right?).");
  }

  collect(samples) {
    if (!this.ready || this.socket.readyState !== WebSocket.OPEN) return;
    this.pending.push(samples);
    this.pendingLength += samples.length;
    if (this.pendingLength < SEND_EVERY) return;
    const pcm = new Int16Array(this.pendingLength);
    let at = 0;
    for (const block of this.pending) {
      for (let i = 0; i < block.length; i++) pcm[at++] = Math.max(-1, Math.min(1, block[i])) * 32767;
    }
    this.pending = [];
    this.pendingLength = 0;
    this.socket.send(JSON.stringify({ type: "input_audio_buffer.append", audio: toBase64(pcm) }));
  }

  receive(event) {
    switch (event.type) {
      case "session.created":
        this.socket.send(JSON.stringify({
          type: "session.update",
          session: {
            type: "realtime",
            audio: {
              input: { format: { type: "audio/pcm", rate: RATE }, turn_detection: { type: this.turnDetection } },
              output: { format: { type: "audio/pcm", rate: RATE } },
            },
          },
        }));
        break;
      case "session.updated":
        this.ready = true;
        this.ui.state(`Listening (${event.session?.audio?.input?.turn_detection?.type ?? this.turnDetection})`);
        break;
      case "input_audio_buffer.speech_started":
        this.silence(); // barge-in: the user talks over the answer
        this.ui.state("Hearing you…");
        break;
      case "input_audio_buffer.speech_stopped":
        this.ui.state("Thinking…");
        break;
      case "conversation.item.input_audio_transcription.completed":
        this.ui.heard(event.transcript || "");
        break;
      case "response.output_audio_transcript.delta":
      case "response.output_text.delta":
        this.ui.answerDelta(event.delta || "");
        break;
      case "response.output_audio.delta":
        this.play(fromBase64(event.delta));
        this.ui.state("Speaking");
        break;
      case "output_audio_buffer.cleared":
        this.silence();
        break;
      case "response.done":
        this.ui.answerDone(event.response?.status);
        if (this.ready) this.ui.state("Listening");
        break;
      case "error":
        this.ui.error(event.error?.message || "the voice session reported an error");
        break;
      default:
        break;
    }
  }

  play(samples) {
    if (!samples.length) return;
    const buffer = this.context.createBuffer(1, samples.length, RATE);
    buffer.copyToChannel(samples, 0);
    const node = this.context.createBufferSource();
    node.buffer = buffer;
    node.connect(this.context.destination);
    this.playAt = Math.max(this.playAt, this.context.currentTime + 0.05);
    node.start(this.playAt);
    this.playAt += buffer.duration;
    this.playing.add(node);
    node.onended = () => this.playing.delete(node);
  }

  silence() {
    for (const node of this.playing) {
      try { node.stop(); } catch { /* already ended */ }
    }
    this.playing.clear();
    this.playAt = 0;
  }

  stop() {
    if (this.stopped) return; // the socket's close comes after a stop the user asked for
    this.stopped = true;
    this.ready = false;
    this.silence();
    this.socket?.close();
    this.stream?.getTracks().forEach((t) => t.stop());
    this.context?.close();
    this.ui.state("Voice off");
  }
}
