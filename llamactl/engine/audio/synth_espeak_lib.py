"""ctypes declarations for the part of eSpeak NG's `speak_lib.h` the synthesizer uses."""

from __future__ import annotations

import ctypes


class EspeakVoice(ctypes.Structure):
    """`espeak_VOICE`; `languages` is a void pointer because it holds embedded NULs."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_void_p),
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


def load_library(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetVoiceByName.restype = ctypes.c_int
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_SetParameter.restype = ctypes.c_int
    lib.espeak_SetSynthCallback.argtypes = [ctypes.c_void_p]
    lib.espeak_SetSynthCallback.restype = None
    lib.espeak_Synth.argtypes = [
        ctypes.c_void_p,  # text
        ctypes.c_size_t,  # size
        ctypes.c_uint,  # position
        ctypes.c_int,  # position_type
        ctypes.c_uint,  # end_position
        ctypes.c_uint,  # flags
        ctypes.c_void_p,  # unique_identifier
        ctypes.c_void_p,  # user_data
    ]
    lib.espeak_Synth.restype = ctypes.c_int
    lib.espeak_Synchronize.restype = ctypes.c_int
    lib.espeak_ListVoices.argtypes = [ctypes.c_void_p]
    lib.espeak_ListVoices.restype = ctypes.POINTER(ctypes.POINTER(EspeakVoice))
    # textptr (advanced past the clause it read, NULL at the end), textmode, phonememode
    lib.espeak_TextToPhonemes.argtypes = [
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_int,
        ctypes.c_int,
    ]
    lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
    return lib


def voice_languages(ptr: int | None) -> list[str]:
    """Decode `languages`: (priority byte, NUL-terminated name) pairs ended by a 0 byte."""
    out: list[str] = []
    if not ptr:
        return out
    pos = ptr
    while ctypes.string_at(pos, 1) != b"\0":
        name = ctypes.string_at(pos + 1)
        out.append(name.decode(errors="replace"))
        pos += 2 + len(name)
    return out
