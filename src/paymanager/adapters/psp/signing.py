"""Webhook signatures of the three dialects: made by the sandbox PSPs, checked by the drivers.

IPPS: `X-IPPS-Signature: <hex HMAC-SHA256(secret, body)>`. QP: `X-QP-Signature: t=<unix>,v1=<hex
HMAC-SHA256(secret, "t.body")>`. Wise: `X-Signature-SHA256: <base64 RSA-SHA256 signature of the body>`
checked with the PSP's public key (asymmetric: we hold nothing that could forge one).
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa


def hmac_hex(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def check_hmac(secret: str, message: bytes, signature: str) -> bool:
    return bool(secret) and hmac.compare_digest(hmac_hex(secret, message), signature.strip().lower())


def qp_header(secret: str, body: bytes, timestamp: int) -> str:
    return f"t={timestamp},v1={hmac_hex(secret, str(timestamp).encode() + b'.' + body)}"


def check_qp(secret: str, body: bytes, header: str) -> bool:
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    timestamp, signature = parts.get("t", ""), parts.get("v1", "")
    if not timestamp.isdigit() or not signature:
        return False
    return check_hmac(secret, timestamp.encode() + b"." + body, signature)


def new_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_pem(key: rsa.RSAPrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def rsa_sign(key: rsa.RSAPrivateKey, body: bytes) -> str:
    return base64.b64encode(key.sign(body, padding.PKCS1v15(), hashes.SHA256())).decode()


def check_rsa(public_key_pem: str, body: bytes, signature: str) -> bool:
    if not public_key_pem or not signature:
        return False
    try:
        key = serialization.load_pem_public_key(public_key_pem.encode())
        assert isinstance(key, rsa.RSAPublicKey)
        key.verify(base64.b64decode(signature, validate=True), body, padding.PKCS1v15(), hashes.SHA256())
    except (InvalidSignature, ValueError, AssertionError):
        return False
    return True
