// Unmodified Uppy 6 (@uppy/core + @uppy/aws-s3) for the browser tests.
import Uppy from '@uppy/core'
import AwsS3 from '@uppy/aws-s3'
import { install } from './uppy-harness.js'

install(Uppy, AwsS3)
