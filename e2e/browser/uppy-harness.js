// install defines window.uppyUpload(file, pluginOptions) for the browser
// tests: it uploads one file with an unmodified Uppy and the @uppy/aws-s3
// plugin given (Uppy 6 or Uppy 5) and returns what Uppy reports. The
// classes are passed in so each Uppy major resolves its own packages.
export function install(Uppy, AwsS3) {
  window.uppyUpload = async (file, opts) => {
    const uppy = new Uppy({ autoProceed: false })
    uppy.use(AwsS3, opts)
    const parts = []
    uppy.on('s3-multipart:part-uploaded', (_f, part) => parts.push(part.PartNumber ?? part.partNumber))
    uppy.addFile({ name: file.name, type: file.type || 'application/octet-stream', data: file })
    const result = await uppy.upload()
    return {
      parts: parts.length,
      successful: result.successful.map((f) => ({ name: f.name, uploadURL: f.uploadURL, body: f.response && f.response.body })),
      failed: result.failed.map((f) => ({ name: f.name, error: String(f.error) })),
    }
  }
}
