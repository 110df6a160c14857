package s3api

import (
	"context"
	"io"

	"github.com/slipstream-io/slipstream/internal/object"
)

// nopObjects is an Objects that knows nothing, for routing tests.
type nopObjects struct{}

var _ Objects = nopObjects{}

func (nopObjects) ListBuckets(context.Context) ([]object.BucketInfo, error) { return nil, nil }
func (nopObjects) CreateBucket(context.Context, string) error               { return nil }
func (nopObjects) DeleteBucket(context.Context, string) error               { return nil }
func (nopObjects) HeadBucket(context.Context, string) error                 { return object.ErrBucketNotFound }
func (nopObjects) ListObjects(context.Context, string, object.ListOptions) (object.ListResult, error) {
	return object.ListResult{}, object.ErrBucketNotFound
}
func (nopObjects) PutObject(context.Context, string, string, io.Reader, object.PutOptions) (object.Info, error) {
	return object.Info{}, object.ErrBucketNotFound
}
func (nopObjects) GetObject(context.Context, string, string, object.GetOptions) (object.Reader, error) {
	return nil, object.ErrNotFound
}
func (nopObjects) HeadObject(context.Context, string, string) (object.Info, error) {
	return object.Info{}, object.ErrNotFound
}
func (nopObjects) DeleteObject(context.Context, string, string) error { return object.ErrNotFound }
func (nopObjects) CopyObject(context.Context, string, string, string, string, object.CopyOptions) (object.Info, error) {
	return object.Info{}, object.ErrNotFound
}
func (nopObjects) CreateMultipartUpload(context.Context, string, string, object.PutOptions) (string, error) {
	return "", object.ErrBucketNotFound
}
func (nopObjects) UploadPart(context.Context, string, string, string, int, io.Reader, object.PutOptions) (object.PartInfo, error) {
	return object.PartInfo{}, object.ErrUploadNotFound
}
func (nopObjects) CompleteMultipartUpload(context.Context, string, string, string, []object.CompletePart) (object.Info, error) {
	return object.Info{}, object.ErrUploadNotFound
}
func (nopObjects) AbortMultipartUpload(context.Context, string, string, string) error {
	return object.ErrUploadNotFound
}
func (nopObjects) ListParts(context.Context, string, string, string) ([]object.PartInfo, error) {
	return nil, object.ErrUploadNotFound
}
func (nopObjects) ListMultipartUploads(context.Context, string, string) ([]object.UploadInfo, error) {
	return nil, object.ErrBucketNotFound
}
