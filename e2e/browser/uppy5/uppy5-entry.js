// Unmodified Uppy 5 (@uppy/core 5 + @uppy/aws-s3 5.1.0) for the browser tests.
import Uppy from '@uppy/core'
import AwsS3 from '@uppy/aws-s3'
import { install } from '../uppy-harness.js'

install(Uppy, AwsS3)
