// Package s3test runs real S3 clients through BotBox against a real S3
// server that verifies SigV4: versitygw (posix backend) in-process, the
// AWS SDK for Go v2 and, where installed, Debian's awscli and
// python3-boto3. The clients sign with the placeholder keys BotBox's
// placeholders feature writes; only BotBox holds the real keys, which
// versitygw's root user has. It is a module of its own so that versitygw
// and the S3 SDK stay out of the product's go.sum.
package s3test
