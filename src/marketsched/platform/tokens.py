"""Bearer tokens and the web pages' signed reads, shared by every live market.

A party's token is a 256-bit random string; the database keeps ``hash_token(token)`` only. A
web page never sends the token: it signs each read with the hash (``page_signature``) under a
key id derived from it (``page_key_id``); see :mod:`marketsched.platform.http`.
"""

from __future__ import annotations

import hashlib
import hmac


def hash_token(token: str) -> str:
    """Tokens are 256-bit random strings, so one SHA-256 is enough to store them safely (a slow
    password hash protects guessable secrets; these are not guessable)."""
    return hashlib.sha256(token.encode()).hexdigest()

def page_key_id(token_hash: str) -> str:
    """The web page's key id for a party (see :mod:`marketsched.platform.http`): not the hash itself."""
    return hashlib.sha256(("marketsched-kid:" + token_hash).encode()).hexdigest()[:32]

def page_signature(token_hash: str, method: str, target: str, t_ms: int) -> str:
    """HMAC-SHA256 under the token's hash of ``marketsched-page-v1\\nMETHOD\\nTARGET\\nMILLISECONDS``."""
    msg = f"marketsched-page-v1\n{method}\n{target}\n{t_ms}".encode()
    return hmac.new(token_hash.encode(), msg, hashlib.sha256).hexdigest()
