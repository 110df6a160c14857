package s3api

import (
	"encoding/xml"
	"io"
	"time"
)

const s3NS = "http://s3.amazonaws.com/doc/2006-03-01/"

// timeISO is the time format of XML bodies.
const timeISO = "2006-01-02T15:04:05.000Z"

func isoTime(t time.Time) string { return t.UTC().Format(timeISO) }

func writeXMLBody(w io.Writer, v any) {
	io.WriteString(w, xml.Header)
	enc := xml.NewEncoder(w)
	_ = enc.Encode(v) // the client has the status already; nothing to do on a write error
}

type owner struct {
	ID          string `xml:"ID"`
	DisplayName string `xml:"DisplayName"`
}

var defaultOwner = owner{ID: "slipstream", DisplayName: "slipstream"}

type listAllMyBucketsResult struct {
	XMLName xml.Name     `xml:"ListAllMyBucketsResult"`
	NS      string       `xml:"xmlns,attr"`
	Owner   owner        `xml:"Owner"`
	Buckets []bucketElem `xml:"Buckets>Bucket"`
}

type bucketElem struct {
	Name         string `xml:"Name"`
	CreationDate string `xml:"CreationDate"`
}

type locationConstraint struct {
	XMLName xml.Name `xml:"LocationConstraint"`
	NS      string   `xml:"xmlns,attr"`
	Region  string   `xml:",chardata"`
}

type versioningConfiguration struct {
	XMLName xml.Name `xml:"VersioningConfiguration"`
	NS      string   `xml:"xmlns,attr"`
}

type objectElem struct {
	Key          string `xml:"Key"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         int64  `xml:"Size"`
	StorageClass string `xml:"StorageClass"`
	Owner        *owner `xml:"Owner,omitempty"`
}

type prefixElem struct {
	Prefix string `xml:"Prefix"`
}

type listBucketResultV2 struct {
	XMLName               xml.Name     `xml:"ListBucketResult"`
	NS                    string       `xml:"xmlns,attr"`
	Name                  string       `xml:"Name"`
	Prefix                string       `xml:"Prefix"`
	Delimiter             string       `xml:"Delimiter,omitempty"`
	StartAfter            string       `xml:"StartAfter,omitempty"`
	ContinuationToken     string       `xml:"ContinuationToken,omitempty"`
	NextContinuationToken string       `xml:"NextContinuationToken,omitempty"`
	KeyCount              int          `xml:"KeyCount"`
	MaxKeys               int          `xml:"MaxKeys"`
	EncodingType          string       `xml:"EncodingType,omitempty"`
	IsTruncated           bool         `xml:"IsTruncated"`
	Contents              []objectElem `xml:"Contents"`
	CommonPrefixes        []prefixElem `xml:"CommonPrefixes"`
}

type listBucketResultV1 struct {
	XMLName        xml.Name     `xml:"ListBucketResult"`
	NS             string       `xml:"xmlns,attr"`
	Name           string       `xml:"Name"`
	Prefix         string       `xml:"Prefix"`
	Marker         string       `xml:"Marker"`
	NextMarker     string       `xml:"NextMarker,omitempty"`
	Delimiter      string       `xml:"Delimiter,omitempty"`
	MaxKeys        int          `xml:"MaxKeys"`
	EncodingType   string       `xml:"EncodingType,omitempty"`
	IsTruncated    bool         `xml:"IsTruncated"`
	Contents       []objectElem `xml:"Contents"`
	CommonPrefixes []prefixElem `xml:"CommonPrefixes"`
}

// deleteRequest is the body of DeleteObjects.
type deleteRequest struct {
	XMLName xml.Name       `xml:"Delete"`
	Quiet   bool           `xml:"Quiet"`
	Objects []deleteObject `xml:"Object"`
}

type deleteResult struct {
	XMLName xml.Name       `xml:"DeleteResult"`
	NS      string         `xml:"xmlns,attr"`
	Deleted []deletedElem  `xml:"Deleted"`
	Errors  []deleteErrorE `xml:"Error"`
}

type deletedElem struct {
	Key string `xml:"Key"`
}

type deleteErrorE struct {
	Key     string `xml:"Key"`
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

type copyObjectResult struct {
	XMLName      xml.Name `xml:"CopyObjectResult"`
	NS           string   `xml:"xmlns,attr"`
	LastModified string   `xml:"LastModified"`
	ETag         string   `xml:"ETag"`
}

type copyPartResult struct {
	XMLName      xml.Name `xml:"CopyPartResult"`
	NS           string   `xml:"xmlns,attr"`
	LastModified string   `xml:"LastModified"`
	ETag         string   `xml:"ETag"`
}

type initiateMultipartUploadResult struct {
	XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
	NS       string   `xml:"xmlns,attr"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	UploadID string   `xml:"UploadId"`
}

// completeMultipartUpload is the body of CompleteMultipartUpload.
type completeMultipartUpload struct {
	XMLName xml.Name `xml:"CompleteMultipartUpload"`
	Parts   []struct {
		PartNumber int    `xml:"PartNumber"`
		ETag       string `xml:"ETag"`
	} `xml:"Part"`
}

type completeMultipartUploadResult struct {
	XMLName  xml.Name `xml:"CompleteMultipartUploadResult"`
	NS       string   `xml:"xmlns,attr"`
	Location string   `xml:"Location"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	ETag     string   `xml:"ETag"`
}

type partElem struct {
	PartNumber   int    `xml:"PartNumber"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         int64  `xml:"Size"`
}

type listPartsResult struct {
	XMLName              xml.Name   `xml:"ListPartsResult"`
	NS                   string     `xml:"xmlns,attr"`
	Bucket               string     `xml:"Bucket"`
	Key                  string     `xml:"Key"`
	UploadID             string     `xml:"UploadId"`
	Initiator            owner      `xml:"Initiator"`
	Owner                owner      `xml:"Owner"`
	StorageClass         string     `xml:"StorageClass"`
	PartNumberMarker     int        `xml:"PartNumberMarker"`
	NextPartNumberMarker int        `xml:"NextPartNumberMarker"`
	MaxParts             int        `xml:"MaxParts"`
	IsTruncated          bool       `xml:"IsTruncated"`
	Parts                []partElem `xml:"Part"`
}

type uploadElem struct {
	Key          string `xml:"Key"`
	UploadID     string `xml:"UploadId"`
	Initiator    owner  `xml:"Initiator"`
	Owner        owner  `xml:"Owner"`
	StorageClass string `xml:"StorageClass"`
	Initiated    string `xml:"Initiated"`
}

type listMultipartUploadsResult struct {
	XMLName            xml.Name     `xml:"ListMultipartUploadsResult"`
	NS                 string       `xml:"xmlns,attr"`
	Bucket             string       `xml:"Bucket"`
	KeyMarker          string       `xml:"KeyMarker"`
	UploadIDMarker     string       `xml:"UploadIdMarker"`
	NextKeyMarker      string       `xml:"NextKeyMarker"`
	NextUploadIDMarker string       `xml:"NextUploadIdMarker"`
	Prefix             string       `xml:"Prefix"`
	Delimiter          string       `xml:"Delimiter,omitempty"`
	EncodingType       string       `xml:"EncodingType,omitempty"`
	MaxUploads         int          `xml:"MaxUploads"`
	IsTruncated        bool         `xml:"IsTruncated"`
	Uploads            []uploadElem `xml:"Upload"`
	CommonPrefixes     []prefixElem `xml:"CommonPrefixes"`
}
