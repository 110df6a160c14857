"""boto3 checks against a running Slipstream cluster.

Reads AWS_ENDPOINT_URL and credentials from the environment (set by the Go
test) and SECOND_ENDPOINT, another node. Every check asserts; the script
prints "boto3 checks: all passed" only when all of them hold.
"""
import hashlib
import io
import os
import sys
import time
import urllib.request

import boto3
import botocore
from botocore.config import Config

EP = os.environ["AWS_ENDPOINT_URL"]
EP2 = os.environ["SECOND_ENDPOINT"]
# Slipstream verifies Signature Version 4 only (SigV2 is deprecated by AWS);
# boto3 still presigns with SigV2 unless told otherwise.
cfg = Config(s3={"addressing_style": "path"}, signature_version="s3v4", retries={"max_attempts": 2})
s3 = boto3.client("s3", endpoint_url=EP, config=cfg)
s3b = boto3.client("s3", endpoint_url=EP2, config=cfg)


T0 = time.time()


def step(name):
    print(f"{time.time() - T0:6.2f}s {name}", flush=True)


def expect_error(code, fn, *a, **kw):
    try:
        fn(*a, **kw)
    except botocore.exceptions.ClientError as e:
        got = e.response["Error"]["Code"]
        assert got == code, f"expected {code}, got {got}"
        return
    raise AssertionError(f"expected {code}, call succeeded")


B = "boto-bucket"
s3.create_bucket(Bucket=B)
assert B in [b["Name"] for b in s3b.list_buckets()["Buckets"]]
s3b.head_bucket(Bucket=B)

step("put / get / head")
# put / get / head with metadata, through different nodes
body = os.urandom(300_000)
r = s3.put_object(Bucket=B, Key="a/b/c.bin", Body=body, ContentType="application/x-test", Metadata={"color": "blue"})
assert r["ETag"] == '"%s"' % hashlib.md5(body).hexdigest(), r["ETag"]
g = s3b.get_object(Bucket=B, Key="a/b/c.bin")
assert g["Body"].read() == body
assert g["ContentType"] == "application/x-test"
assert g["Metadata"].get("color") == "blue", g["Metadata"]
h = s3b.head_object(Bucket=B, Key="a/b/c.bin")
assert h["ContentLength"] == len(body)

step("ranges")
# ranges
g = s3b.get_object(Bucket=B, Key="a/b/c.bin", Range="bytes=100-199")
assert g["Body"].read() == body[100:200]
assert g["ContentRange"] == f"bytes 100-199/{len(body)}"
g = s3.get_object(Bucket=B, Key="a/b/c.bin", Range="bytes=-10")
assert g["Body"].read() == body[-10:]
expect_error("InvalidRange", s3.get_object, Bucket=B, Key="a/b/c.bin", Range=f"bytes={len(body)}-")

step("conditionals")
# conditionals
etag = h["ETag"]
expect_error("PreconditionFailed", s3.get_object, Bucket=B, Key="a/b/c.bin", IfMatch='"0000"')
try:
    s3.get_object(Bucket=B, Key="a/b/c.bin", IfNoneMatch=etag)
    raise AssertionError("If-None-Match with the current ETag must give 304")
except botocore.exceptions.ClientError as e:
    assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 304

step("listing with")
# listing with delimiter and paging
for i in range(12):
    s3.put_object(Bucket=B, Key=f"list/{i:02d}", Body=b"x" * i)
s3.put_object(Bucket=B, Key="list/sub/deep", Body=b"d")
r = s3b.list_objects_v2(Bucket=B, Prefix="list/", Delimiter="/")
assert [o["Key"] for o in r["Contents"]] == [f"list/{i:02d}" for i in range(12)], r["Contents"]
assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["list/sub/"]
keys = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=B, Prefix="list/", PaginationConfig={"PageSize": 5}):
    keys += [o["Key"] for o in page.get("Contents", [])]
assert len(keys) == 13 and keys == sorted(keys), keys
r = s3.list_objects_v2(Bucket=B, Prefix="list/", StartAfter="list/09")
assert [o["Key"] for o in r["Contents"]] == ["list/10", "list/11", "list/sub/deep"]

step("copy")
# copy
s3.copy_object(Bucket=B, Key="copy.bin", CopySource={"Bucket": B, "Key": "a/b/c.bin"})
assert s3b.get_object(Bucket=B, Key="copy.bin")["Body"].read() == body

step("multipart through")
# multipart through boto3's transfer manager (8 MiB parts)
big = os.urandom(19 * 1024 * 1024)
s3.upload_fileobj(io.BytesIO(big), B, "big.bin", Config=boto3.s3.transfer.TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=8 << 20))
h = s3b.head_object(Bucket=B, Key="big.bin")
assert h["ETag"].endswith('-3"'), h["ETag"]
buf = io.BytesIO()
s3b.download_fileobj(B, "big.bin", buf)
assert buf.getvalue() == big

step("explicit multipart")
# explicit multipart: list uploads/parts, abort
mp = s3.create_multipart_upload(Bucket=B, Key="aborted")
s3b.upload_part(Bucket=B, Key="aborted", UploadId=mp["UploadId"], PartNumber=1, Body=b"p" * 1024)
ups = s3.list_multipart_uploads(Bucket=B)["Uploads"]
assert any(u["UploadId"] == mp["UploadId"] for u in ups), ups
parts = s3.list_parts(Bucket=B, Key="aborted", UploadId=mp["UploadId"])["Parts"]
assert [p["PartNumber"] for p in parts] == [1]
s3.abort_multipart_upload(Bucket=B, Key="aborted", UploadId=mp["UploadId"])
expect_error("NoSuchUpload", s3.list_parts, Bucket=B, Key="aborted", UploadId=mp["UploadId"])

step("presigned GET")
# presigned GET with plain urllib
url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "a/b/c.bin"}, ExpiresIn=60)
assert urllib.request.urlopen(url).read() == body

step("delete, delete many")
# delete, delete many
s3.delete_object(Bucket=B, Key="copy.bin")
expect_error("NoSuchKey", s3b.get_object, Bucket=B, Key="copy.bin")
allkeys = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=B) for o in p.get("Contents", [])]
r = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": k} for k in allkeys]})
assert len(r.get("Deleted", [])) == len(allkeys), r
assert s3b.list_objects_v2(Bucket=B)["KeyCount"] == 0

step("errors")
# errors
expect_error("NoSuchBucket", s3.get_object, Bucket="no-such-bucket", Key="x")
s3.delete_bucket(Bucket=B)
try:
    s3b.head_bucket(Bucket=B)
    raise AssertionError("bucket still exists after delete")
except botocore.exceptions.ClientError as e:
    assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 404

print("boto3 checks: all passed")
